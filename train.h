/* train.h - v0.1 - a header-only training kit in C: tensors, ops with
   their backward, a tape, AdamW, checkpoints, and a ledger of every byte.

   Do this:
      #define TRAIN_IMPLEMENTATION
   before you include this file in *one* C or C++ file to create the
   implementation. Every other file includes it plainly.

      // in exactly one .c file, before any other #include:
      #define TRAIN_IMPLEMENTATION
      #include "train.h"

   train.h uses POSIX 2008 (clock_gettime, fseeko, fsync, mkdir ...) and
   turns it on itself (_DEFAULT_SOURCE, _POSIX_C_SOURCE), which works only
   before the first system header of the file: hence "first". It then
   compiles warning-free with gcc and clang, -std=c99 or -std=c11 -Wall
   -Wextra -pedantic, and as C++ (tests/test_compile_modes.sh checks).

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
                                        //   (the grad buffer appears on first use;
                                        //   an activation's gradient lives from its
                                        //   first writer to its producer's backward)
      trn_clip_grad_norm(&model, 1.0f); // one pass over the flat grad buffer
      trn_adamw_step(&opt, &model, lr); // m and v appear on the first call
      trn_checkpoint_save(...);         // safetensors, atomic, resumable

   What it does NOT do: no dynamic shapes beyond 4 dims, no dtype other than
   float32 on the CPU (ids are int; bf16 activations are train_cuda.h's
   mixed precision, see trn_dtype), no automatic broadcasting, no graph
   optimizer, no Python. Every op is written out; read it.

   Contents (grep for the anchors, e.g. ">>ledger"). The implementation
   follows this order; the declarations too, but for >>backend and >>matmul,
   which come before >>ops there (the table type, trn_sgemm).
      >>errors      result codes, reasons, fatal programmer errors
      >>ledger      counted allocations per kind, OS view (RSS)
      >>rng         splitmix64 RNG: seeds, uniform, normal, shuffle
      >>tensor      tensors as views; the parameter table; flat buffers
      >>ops         forward/backward pairs (plain functions), each named
                    after its tape op: trn_linear -> trn_linear_forward
      >>ops2        the ops of modern decoders: mul, SiLU, sigmoid, tanh,
                    softmax, RMSNorm, RoPE
      >>ops3        the kernels of dropout, transpose, slice/concat, sums,
                    batched matmul, cross-entropy+, BCE, L1, Huber (their
                    tape ops: extras/train_ops.h)
      >>backend     the table of kernels a backend provides (CPU here)
      >>tape        the model: arena, tape, ops that record themselves
        >>units     recompute regions (trn_recompute) and units
        >>mlp       GPT-2's feed-forward as one call (trn_mlp)
        >>addln     the residual add and the next layernorm as one call
                    (trn_add_layernorm)
      >>opapi       your own op: trn_op, trn_op_apply, trn_grad, trn_gradcheck
      >>adamw       AdamW and SGD (their kernels: plain loop, then vector),
                    parameter groups, LR schedules, clipping
        >>sync-free the step with one host wait (clip + AdamW on a device)
      >>matmul      trn_sgemm: blocked, vectorized, OpenMP; trn_sgemm_ref
      >>json        the one strict JSON reader (a cursor): safetensors
                    headers (its typed calls: extras/train_json.h)
      >>checkpoint  safetensors weights, training-state checkpoints
      >>profile     the tape's time marks per op kind (--profile)
   (>>sharding marks the model's hooks that train_nccl.h fills.)

   Companions (stb-style, each one concern; include after train.h, and they
   are implemented in the file that defines TRAIN_IMPLEMENTATION):
      extras/train_data.h  tokenizers (bytes, GPT-2 BPE, Hugging Face
                           tokenizer.json), token shards (uint16 and
                           uint32 ids), text files, the batch loader
      extras/train_loop.h  progress/ETA, CSV, TensorBoard, spike guard,
                           early stopping, the profile table
      extras/train_run.h   run directories: keep-K checkpoints, resume from
                           the newest good one, keep-best, async saves
      extras/train_generate.h  generation with a key/value cache
      extras/train_ops.h   more tape ops (dropout, shapes, sums, bmm, more
                           losses), written as your own ops are
      extras/train_json.h  your config.json: typed reads with the JSON
                           reader of >>json

   License: MIT (see the end of the file).
*/
#ifndef TRAIN_H_INCLUDED
#define TRAIN_H_INCLUDED

/* Feature-test macros: POSIX 2008 and the usual BSD names, also under a
   strict -std=c99 (where the C library hides them). They only take effect
   before the first system header; the implementation stops with a clear
   #error when they came too late. Not on Apple, where _POSIX_C_SOURCE
   would hide names that are visible by default. */
#ifndef _DEFAULT_SOURCE
#define _DEFAULT_SOURCE
#endif
#if !defined(_POSIX_C_SOURCE) && !defined(_XOPEN_SOURCE) && !defined(_GNU_SOURCE) && !defined(__APPLE__)
#define _POSIX_C_SOURCE 200809L
#endif

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <math.h> /* trn_rope_inv_freq below */

#ifndef TRNDEF
#ifdef TRAIN_STATIC
#if defined(__GNUC__) || defined(__clang__) /* a program uses some of them: no -Wunused-function for the rest */
#define TRNDEF static __attribute__((unused))
#else
#define TRNDEF static
#endif
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
    TRN_KIND_ACTIVATIONS, /* the per-step arena: what forward saves        */
    TRN_KIND_ACT_GRADS,   /* gradients of activations, each freed as soon
                             as its producer's backward has read it; also
                             the classifier's chunk scratch               */
    TRN_KIND_TEMP,        /* short-lived buffers (I/O staging, scratch)    */
    TRN_KIND_COMM,        /* communication buffers (DDP)                   */
    TRN_KIND_KV_CACHE,    /* keys and values kept for generation           */
    TRN_KIND_RUNTIME,     /* CUDA context, cuBLAS workspace, tables        */
    TRN_KIND_STAGING,     /* async checkpoint: the host copy being written */
    TRN_KIND_WEIGHTS_BF16, /* bf16 precision: the weights' bf16 copy that
                             kernels read (WEIGHTS holds the fp32 master) */
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
/* How a tensor's memory holds its values. TRN_F32 everywhere on the CPU.
   With train_cuda.h's bf16 precision, activations and their gradients are
   TRN_BF16 (the top 16 bits of an fp32: 8 exponent bits, 7 mantissa bits),
   as are the weight copies that kernels read; statistics (layernorm mean
   and rstd, log-sum-exp, losses), parameter gradients, the fp32 master
   weights and the optimizer state stay TRN_F32. data is declared float *
   either way: a bf16 tensor's data points at 2-byte values, and only
   kernels (and trn_read/trn_write, which convert) look inside. */
typedef enum trn_dtype { TRN_F32 = 0, TRN_BF16 = 1 } trn_dtype;
TRNDEF size_t trn_dtype_size(int dtype);       /* 4 or 2                   */
TRNDEF const char *trn_dtype_name(int dtype);  /* "f32", "bf16"            */

typedef struct trn_tensor {
    float *data;        /* values (of dtype: see trn_dtype)                */
    float *grad;        /* d(loss)/d(values), same shape; NULL until needed.
                           A parameter's gradient is always TRN_F32; an
                           activation's has the activation's dtype       */
    int dtype;          /* TRN_F32 (0) or TRN_BF16: how data holds values.
                           A parameter under bf16: its bf16 copy (the fp32
                           master is m->param_data + offset)              */
    int ndim;
    int shape[TRN_MAX_DIMS];
    size_t size;        /* number of elements                              */
    size_t offset;      /* parameters: element offset in the flat buffers  */
    int requires_grad;  /* backward computes this tensor's gradient        */
    int is_param;
    int decay;          /* parameters: AdamW weight decay applies (ndim>=2) */
    float lr_scale;     /* parameters: lr multiplier, 1 (see trn_param_group) */
    float weight_decay; /* parameters: own weight decay if >= 0 (overrides
                           decay and the optimizer's); -1: the optimizer's */
    int grad_zero;      /* parameters: the gradient is known to be all zero
                           (trn_zero_grad zeroed it and no backward has
                           touched it since), so the first backward to use
                           it may WRITE it (a beta 0 product, a bias
                           gradient from a GEMM's epilogue) instead of
                           adding to it. Set by trn_zero_grad, cleared by
                           every trn_grad of the tensor and at the end of
                           trn_backward (what runs after it, an all-reduce
                           say, may change the buffer)                    */
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
/* RoPE's frequencies as Hugging Face configs scale them (rope_scaling in
   transformers 4.x, rope_parameters in 5.x; "type" or "rope_type"). Pair
   i of a head of hs channels turns by position p times an inverse
   frequency f_i; plain RoPE has f_i = theta^(-2i/hs). The scalings:
     LINEAR   f_i / factor (positions interpolated: a context factor times
              longer looks like the trained one)
     DYNAMIC  "NTK-aware": plain RoPE up to original_max_pos tokens; beyond,
              for a sequence of n = pos0 + T positions, the base grows to
              theta * (factor * n / original_max_pos - (factor - 1))^(hs/(hs-2))
              (transformers recomputes it when the positions outgrow the
              cache; here it follows each call's last position)
     LLAMA3   by wavelength w_i = 2 pi / f_i against the original context
              O = original_max_pos: w_i > O / low_freq_factor (slow pairs):
              f_i / factor; w_i < O / high_freq_factor (fast pairs): f_i;
              between, a blend with s = (O / w_i - low) / (high - low):
              (1 - s) f_i / factor + s f_i
   None of them scales the attention (YaRN would: not implemented). */
typedef enum trn_rope_type {
    TRN_ROPE_DEFAULT = 0, TRN_ROPE_LINEAR, TRN_ROPE_DYNAMIC, TRN_ROPE_LLAMA3
} trn_rope_type;
typedef struct trn_rope_scaling {
    int type;                                /* a trn_rope_type             */
    float factor;                            /* linear, dynamic, llama3     */
    float low_freq_factor, high_freq_factor; /* llama3 (1 and 4 in 3.1)     */
    int original_max_pos;                    /* dynamic, llama3             */
} trn_rope_scaling;
/* both backends compute the frequencies with this one function (on a GPU
   inside the kernel: it is __host__ __device__ under nvcc) */
#ifdef __CUDACC__
#define TRN__HD __host__ __device__
#else
#define TRN__HD
#endif
/* the inverse frequency of pair i (0 <= i < hs/2), in double; s NULL or
   type DEFAULT: plain RoPE. seq_len: positions the call covers (pos0 + T) */
static inline TRN__HD double trn_rope_inv_freq(int i, int hs, float theta, const trn_rope_scaling *s, int seq_len) {
    double base = (double)theta, f, w, lo, hi, sm;
    if (s && s->type == TRN_ROPE_DYNAMIC && seq_len > s->original_max_pos) {
        double n = (double)s->factor * seq_len / s->original_max_pos - ((double)s->factor - 1.0);
        base *= pow(n, (double)hs / (double)(hs - 2));
    }
    f = pow(base, -2.0 * i / hs);
    if (!s) return f;
    if (s->type == TRN_ROPE_LINEAR) return f / s->factor;
    if (s->type != TRN_ROPE_LLAMA3) return f;
    w = 2.0 * 3.141592653589793 / f;
    lo = (double)s->original_max_pos / s->low_freq_factor; /* longer waves than this: scaled */
    hi = (double)s->original_max_pos / s->high_freq_factor; /* shorter: kept */
    if (w > lo) return f / s->factor;
    if (w < hi) return f;
    sm = ((double)s->original_max_pos / w - s->low_freq_factor) / ((double)s->high_freq_factor - s->low_freq_factor);
    return (1.0 - sm) * f / s->factor + sm * f;
}

/* AdamW over the flat buffers in one pass needs to know, per element,
   whether weight decay applies: a slice is described by runs of elements
   treated alike, each run ending (exclusive, relative to the slice) at
   `end`. Frozen parameters (requires_grad 0) are skipped: their weights,
   moments and gradients are not touched. */
typedef enum trn_adamw_mode { TRN_ADAMW_SKIP = 0, TRN_ADAMW_NO_DECAY = 1, TRN_ADAMW_DECAY = 2 } trn_adamw_mode;
typedef struct trn_adamw_seg { size_t end; int mode; } trn_adamw_seg;

typedef struct trn_backend {
    const char *name;
    trn_place place;
    /* the dtype of activations and activation gradients, and of the weight
       copies kernels read: TRN_F32, or TRN_BF16 (train_cuda.h in bf16).
       Under TRN_BF16 every float * below that is an activation, an
       activation gradient or a weight input points at bf16 values; these
       stay fp32: layernorm/rmsnorm mean and rstd, lse, losses, the
       parameter-gradient outputs (dw, dbias, db, dtable: accumulated in
       fp32), and everything of the optimizer and the gradient norm. */
    int act_dtype;
    /* dst = s*src (accumulate 0) or dst += s*src (1), n elements, converting
       between dtypes (math in fp32; to bf16: round to nearest even). dst
       may be src (in place) */
    void (*convert)(void *dst, int dst_dtype, const void *src, int src_dtype, size_t n, int accumulate, float s);
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
    /* embedding_backward for ids made of B equal rows of T ids (positions:
       ids[b T + t] = ids[t]): dtable[ids[t]] += sum over b of dout[b][t],
       the batch summed before the table is touched. NULL:
       embedding_backward (the same sums) */
    void (*embedding_backward_rows)(float *dtable, const float *dout, const int *ids, int B, int T, int C);
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
    /* dst += src, both in act_dtype (activation gradients); an fp32 sum
       under bf16 (a parameter's gradient) goes through convert(dst,
       TRN_F32, src, TRN_F32, n, 1, 1.0f) */
    void (*accumulate)(float *dst, const float *src, size_t n);
    void (*attention_forward)(float *out, float *att, const float *qkv,
                              int B, int T, int NH, int NKV, int hs, int causal);
    void (*attention_backward)(float *dqkv, float *scratch, const float *dout,
                               const float *qkv, const float *att,
                               int B, int T, int NH, int NKV, int hs, int causal);
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
    /* >>ops2: the ops of modern decoders (see the CPU functions) */
    void (*mul_forward)(float *out, const float *a, const float *b, size_t N, size_t C);
    void (*mul_backward)(float *da, float *db, const float *dout, const float *a, const float *b,
                         size_t N, size_t C);
    void (*silu_forward)(float *out, const float *inp, size_t n);
    void (*silu_backward)(float *dinp, const float *inp, const float *dout, size_t n);
    void (*sigmoid_forward)(float *out, const float *inp, size_t n);
    void (*sigmoid_backward)(float *dinp, const float *out, const float *dout, size_t n);
    void (*tanh_forward)(float *out, const float *inp, size_t n);
    void (*tanh_backward)(float *dinp, const float *out, const float *dout, size_t n);
    void (*softmax_forward)(float *out, const float *inp, int N, int C);
    void (*softmax_backward)(float *dinp, const float *out, const float *dout, int N, int C);
    void (*rmsnorm_forward)(float *out, float *rstd, const float *inp, const float *w, int N, int C, float eps);
    void (*rmsnorm_backward)(float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                             const float *rstd, int N, int C);
    void (*rope_forward)(float *out, const float *inp, int B, int T, int H, int R, int hs, int pos0, float theta,
                         const trn_rope_scaling *sc);
    void (*rope_backward)(float *dinp, const float *dout, int B, int T, int H, int R, int hs, int pos0,
                          float theta, const trn_rope_scaling *sc);
    /* fused attention (flash-style): what trn_attention runs; the pair
       above is the materialized reference */
    void (*flash_attention_forward)(float *out, float *lse, const float *qkv,
                                    int B, int T, int NH, int NKV, int hs, int causal);
    void (*flash_attention_backward)(float *dqkv, const float *dout, const float *qkv,
                                     const float *out, const float *lse,
                                     int B, int T, int NH, int NKV, int hs, int causal);
    /* SGD with momentum (see >>adamw); buf NULL when momentum == 0 */
    void (*sgd_update)(float *p, const float *g, float *buf, size_t n, float lr, float momentum,
                       float dampening, float weight_decay, int nesterov, int first);
    /* generation: append keys/values to a cache and attend (extras/train_generate.h's >>kvcache) */
    void (*attention_kv_forward)(float *out, float *att, const float *q, int q_stride, const float *k,
                                 const float *v, int kv_stride, float *kcache, float *vcache, int B, int T,
                                 int pos, int maxT, int NH, int NKV, int hs);
    /* >>ops3 (see the CPU functions) */
    void (*dropout_forward)(float *out, const float *inp, size_t n, float p, uint64_t key);
    void (*dropout_backward)(float *dinp, const float *dout, size_t n, float p, uint64_t key);
    void (*transpose_forward)(float *out, const float *inp, int A, int D0, int Bm, int D1, int C);
    void (*transpose_backward)(float *dinp, const float *dout, int A, int D0, int Bm, int D1, int C);
    void (*slice_forward)(float *out, const float *inp, int N, int C, int start, int len);
    void (*slice_backward)(float *dinp, const float *dout, int N, int C, int start, int len);
    void (*concat_forward)(float *out, const float *a, const float *b, int N, int Ca, int Cb);
    void (*concat_backward)(float *da, float *db, const float *dout, int N, int Ca, int Cb);
    void (*sum_forward)(float *out, const float *inp, int N, size_t C, float scale);
    void (*sum_backward)(float *dinp, const float *dout, int N, size_t C, float scale);
    void (*bmm_forward)(float *out, const float *a, const float *b, int Bt, int M, int N, int K, int ta, int tb);
    void (*bmm_backward)(float *da, float *db, const float *dout, const float *a, const float *b, int Bt, int M,
                         int N, int K, int ta, int tb);
    void (*crossentropy_ex_forward)(float *losses, float *lse, const float *logits, const int *targets, int N,
                                    int V, int Vp, float smoothing);
    void (*crossentropy_ex_backward)(float *dlogits, const float *logits, const float *lse, const int *targets,
                                     float dloss, int N, int V, int Vp, float smoothing);
    void (*bce_logits_forward)(float *losses, const float *x, const float *y, size_t n);
    void (*bce_logits_backward)(float *dx, const float *x, const float *y, float dloss, size_t n);
    void (*l1_forward)(float *losses, const float *pred, const float *target, size_t n);
    void (*l1_backward)(float *dpred, const float *pred, const float *target, float dloss, size_t n);
    void (*huber_forward)(float *losses, const float *pred, const float *target, float delta, size_t n);
    void (*huber_backward)(float *dpred, const float *pred, const float *target, float delta, float dloss,
                           size_t n);
    /* >>mlp: GPT-2's feed-forward fused (trn_mlp). NULL: train.h runs
       matmul_forward + gelu_forward, and matmul_backward into a scratch +
       gelu_backward, which is the same math */
    void (*matmul_gelu_forward)(float *out, float *pre, const float *inp, const float *w, const float *bias,
                                int N, int C, int OC);      /* pre (N,OC) = inp (N,C) w^T + bias; out = gelu(pre) */
    void (*matmul_dgelu_backward)(float *dpre, const float *dout, const float *w, const float *pre, int N, int C,
                                  int OC);                  /* dpre (N,C) = (dout (N,OC) @ w (OC,C)) * gelu'(pre): written, not accumulated */

    /* >>sync-free step: entries that let a device backend run a training
       step with a single host wait (trn_sync). NULL where a backend has no
       such path: train.h then downloads, computes on the host, uploads. */
    /* queue a copy to host memory; it has landed when sync() returns */
    void (*download_async)(void *host_dst, const void *src, size_t bytes);
    /* out[0] = the mean of x[0..n), summed in double (a loss from its rows) */
    void (*mean)(float *out, const float *x, size_t n);
    /* stat[0] = ||g||_2 (sum of squares in double), stat[1] = the clip
       factor: max_norm / (norm + 1e-6) when max_norm > 0 and norm > max_norm,
       else 1. stat is backend memory: nothing comes back to the host. */
    void (*grad_norm_clip)(float *stat, const float *g, size_t n, float max_norm);
    /* AdamW over n elements of the flat buffers in one pass, runs as in
       trn_adamw_seg; clip NULL, or backend memory holding a factor that
       multiplies every gradient first (and is stored back into g);
       p_bf16 NULL, or the bf16 copy of p, rewritten from the new p in the
       same pass (bf16 precision: what forward and backward read) */
    void (*adamw_flat)(float *p, float *g, float *m, float *v, size_t n, const trn_adamw_seg *seg,
                       int n_seg, float lr, float beta1, float beta2, float eps, float weight_decay,
                       float bias_corr1, float bias_corr2, const float *clip, void *p_bf16);
    /* <<sync-free step */
    /* the time ledger (train_cuda.h's >>sites): the launches that follow
       belong to this scope ("classifier"; NULL: none). NULL: no ledger */
    void (*site_scope)(const char *scope);

    /* >>classifier: entries that keep the classifier (trn_linear_cross_entropy)
       at the speed of its GEMMs. NULL / 0 where a backend has none. */
    /* the cross-entropy's forward and backward in one pass over each row:
       losses[n] as crossentropy_forward, and the logits (N,Vp) OVERWRITTEN
       by dloss * (softmax - onehot) (0 in the padding): no second buffer,
       no zero pass (trn_crossentropy_fused is the reference). NULL:
       crossentropy_forward, zero, crossentropy_backward */
    void (*crossentropy_fused)(float *losses, float *logits, const int *targets, float dloss, int N, int V,
                               int Vp);
    /* the most bytes of logits one chunk of the classifier holds; 0:
       TRN__XENT_CHUNK_FLOATS floats (the CPU's 32 MB, cache-sized). A GPU
       wants thousands of rows per chunk: its dW GEMM reads and writes the
       whole fp32 (Vp,C) dW once per chunk */
    size_t xent_chunk_bytes;
    /* matmul_backward whose dinp and dw are WRITTEN (beta = 0: the old
       contents are never read) where write_dinp / write_dw / write_dbias
       say so, and accumulated otherwise: 0 accumulate; 1 the contents are
       garbage (a fresh buffer), write; 2 they are zero (a parameter's
       grad_zero), writing and adding are the same. It is how a fresh
       gradient skips its memset and a read, and how dbias can come out of
       the dW GEMM's epilogue (which can only write). NULL: train.h zeroes
       what is to be written, then calls matmul_backward */
    void (*matmul_backward_ex)(float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                               const float *w, int N, int C, int OC, int write_dinp, int write_dw,
                               int write_dbias);
    /* flash_attention_backward whose dqkv is WRITTEN where write says so
       (a fresh gradient: its memset and the reads of its old values
       skipped), accumulated otherwise. NULL: train.h zeroes dqkv, then
       calls flash_attention_backward */
    void (*flash_attention_backward_ex)(float *dqkv, const float *dout, const float *qkv, const float *out,
                                        const float *lse, int B, int T, int NH, int NKV, int hs, int causal,
                                        int write);
    /* >>addln: the residual add fused into the layernorm that follows it
       (trn_add_layernorm). NULL (either): add_forward, then
       layernorm_forward / layernorm_backward, then a copy, the same math.
       add_layernorm_forward: sum = a + b (rounded to act_dtype; sum may be
       b), out = layernorm(sum, w, bias), mean and rstd as layernorm_forward.
       layernorm_backward_ex: layernorm_backward, and where dinp2 is not
       NULL it is WRITTEN with dinp's final values (the residual's gradient
       handed to the branch in the same pass, no copy); write_dinp: dinp is
       a fresh buffer, WRITTEN (its old contents never read), not added to.
       The plain layernorm's backward uses it for that too (a fresh dx: no
       memset, no read) */
    void (*add_layernorm_forward)(float *sum, float *out, float *mean, float *rstd, const float *a, const float *b,
                                  const float *w, const float *bias, int N, int C);
    void (*layernorm_backward_ex)(float *dinp, float *dinp2, float *dw, float *db, const float *dout,
                                  const float *inp, const float *w, const float *mean, const float *rstd, int N,
                                  int C, int write_dinp);
} trn_backend;

TRNDEF const trn_backend *trn_cpu_backend(void);
TRNDEF void trn_set_threads(int n);   /* OpenMP threads; <= 0 keeps default */
TRNDEF int trn_get_threads(void);
/* Call first in main(argc, argv): OpenMP threads that sleep between
   parallel loops instead of spinning, unless the user set OMP_WAIT_POLICY.
   Spinning threads steal the cores from any other work and, on a machine
   that is busy, wait for cores that spin too: steps several times slower.
   GCC's libgomp reads the variable when it loads, before main, so this
   sets OMP_WAIT_POLICY=passive and re-executes the program once (Linux,
   /proc/self/exe; same pid, same arguments). Elsewhere, or without
   OpenMP, it does nothing. */
TRNDEF void trn_omp_wait_passive(char **argv);

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
TRNDEF void trn_linear_forward(float *out, const float *inp, const float *w, const float *bias,
                               int N, int C, int OC);
TRNDEF void trn_linear_backward(float *dinp, float *dw, float *dbias, const float *dout,
                                const float *inp, const float *w, int N, int C, int OC);
/* the same pair as plain loops: the math to read, the reference to test */
TRNDEF void trn_linear_forward_ref(float *out, const float *inp, const float *w, const float *bias,
                                   int N, int C, int OC);
TRNDEF void trn_linear_backward_ref(float *dinp, float *dw, float *dbias, const float *dout,
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
TRNDEF void trn_matmul_dgelu_backward(float *dpre, const float *dout, const float *w, const float *pre, int N, int C,
                                      int OC);
TRNDEF void trn_relu_forward(float *out, const float *inp, size_t n);
TRNDEF void trn_relu_backward(float *dinp, const float *out, const float *dout, size_t n);
TRNDEF void trn_add_forward(float *out, const float *a, const float *b, size_t n);
TRNDEF void trn_accumulate(float *dst, const float *src, size_t n);
/* attention: qkv (B,T,(NH+2*NKV)*hs) packs NH query heads, then NKV key
   heads, then NKV value heads (NKV = NH: multi-head; NKV < NH: grouped-query,
   query head h reads kv head h/(NH/NKV)); out (B,T,NH*hs). The materialized
   reference saves att (B,NH,T,T); backward needs scratch of the same size. */
TRNDEF void trn_attention_forward(float *out, float *att, const float *qkv,
                                  int B, int T, int NH, int NKV, int hs, int causal);
TRNDEF void trn_attention_backward(float *dqkv, float *scratch, const float *dout,
                                   const float *qkv, const float *att,
                                   int B, int T, int NH, int NKV, int hs, int causal);
/* the fused (flash-style) version: saves only lse (B,NH,T), one log-sum-exp
   per query row, and reads its own output in backward */
TRNDEF void trn_flash_attention_forward(float *out, float *lse, const float *qkv,
                                        int B, int T, int NH, int NKV, int hs, int causal);
TRNDEF void trn_flash_attention_backward(float *dqkv, const float *dout, const float *qkv,
                                         const float *out, const float *lse,
                                         int B, int T, int NH, int NKV, int hs, int causal);
TRNDEF void trn_cross_entropy_forward(float *losses, float *lse, const float *logits,
                                     const int *targets, int N, int V, int Vp);
TRNDEF void trn_cross_entropy_backward(float *dlogits, const float *logits, const float *lse,
                                      const int *targets, float dloss, int N, int V, int Vp);
/* forward and backward at once (the classifier): losses as forward, and
   logits (N,Vp) overwritten by dloss * (softmax - onehot), 0 in the padding */
TRNDEF void trn_crossentropy_fused(float *losses, float *logits, const int *targets, float dloss, int N, int V,
                                   int Vp);
TRNDEF void trn_mse_forward(float *losses, const float *pred, const float *target, size_t n);
TRNDEF void trn_mse_backward(float *dpred, const float *pred, const float *target, float dloss,
                             size_t n);
TRNDEF void trn_mean_pool_forward(float *out, const float *inp, int B, int T, int C);
TRNDEF void trn_mean_pool_backward(float *dinp, const float *dout, int B, int T, int C);
/* the optimizers' kernels (their code is in >>adamw): AdamW over a
   contiguous slice (trn_adamw_update_ref: the plain loop), SGD below */
TRNDEF void trn_adamw_update(float *p, const float *g, float *m, float *v, size_t n, float lr,
                             float beta1, float beta2, float eps, float weight_decay,
                             float bias_corr1, float bias_corr2);
TRNDEF void trn_adamw_update_ref(float *p, const float *g, float *m, float *v, size_t n, float lr,
                                 float beta1, float beta2, float eps, float weight_decay,
                                 float bias_corr1, float bias_corr2);
TRNDEF double trn_sum_squares(const float *x, size_t n);
TRNDEF void trn_scale(float *x, float s, size_t n);
TRNDEF void trn_sgd_update(float *p, const float *g, float *buf, size_t n, float lr, float momentum,
                           float dampening, float weight_decay, int nesterov, int first);
TRNDEF void trn_attention_cached_forward(float *out, float *att, const float *q, int q_stride, const float *k,
                                     const float *v, int kv_stride, float *kcache, float *vcache, int B, int T,
                                     int pos, int maxT, int NH, int NKV, int hs);
/* images (B,H,W,Ch) -> patches (B, (H/P)*(W/P), P*P*Ch); data only, no grad */
TRNDEF void trn_patchify(float *out, const float *img, int B, int H, int W, int Ch, int P);
/* the ops of modern decoders (Llama): >>ops2 below. mul: a (N,C) * b, b of
   N*C elements (same shape) or C elements (one row, broadcast over rows).
   rope: rows of H heads of hs channels (B,T,H*hs); the first R heads of
   each row are rotated (HF rotate-half), the rest copied; row t sits at
   position pos0 + t; sc (NULL: plain RoPE) scales the frequencies, see
   trn_rope_scaling. */
TRNDEF void trn_mul_forward(float *out, const float *a, const float *b, size_t N, size_t C);
TRNDEF void trn_mul_backward(float *da, float *db, const float *dout, const float *a, const float *b,
                             size_t N, size_t C);
TRNDEF void trn_silu_forward(float *out, const float *inp, size_t n);
TRNDEF void trn_silu_backward(float *dinp, const float *inp, const float *dout, size_t n);
TRNDEF void trn_sigmoid_forward(float *out, const float *inp, size_t n);
TRNDEF void trn_sigmoid_backward(float *dinp, const float *out, const float *dout, size_t n);
TRNDEF void trn_tanh_forward(float *out, const float *inp, size_t n);
TRNDEF void trn_tanh_backward(float *dinp, const float *out, const float *dout, size_t n);
TRNDEF void trn_softmax_forward(float *out, const float *inp, int N, int C);
TRNDEF void trn_softmax_backward(float *dinp, const float *out, const float *dout, int N, int C);
TRNDEF void trn_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *w, int N, int C,
                                float eps);
TRNDEF void trn_rmsnorm_backward(float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                                 const float *rstd, int N, int C);
TRNDEF void trn_rope_forward(float *out, const float *inp, int B, int T, int H, int R, int hs, int pos0,
                             float theta, const trn_rope_scaling *sc);
TRNDEF void trn_rope_backward(float *dinp, const float *dout, int B, int T, int H, int R, int hs, int pos0,
                              float theta, const trn_rope_scaling *sc);
/* >>ops3: shapes, reductions, dropout, more losses (see each definition; the
   tape ops that call them are in extras/train_ops.h) */
TRNDEF void trn_dropout_forward(float *out, const float *inp, size_t n, float p, uint64_t key);
TRNDEF void trn_dropout_backward(float *dinp, const float *dout, size_t n, float p, uint64_t key);
TRNDEF void trn_transpose_forward(float *out, const float *inp, int A, int D0, int Bm, int D1, int C);
TRNDEF void trn_transpose_backward(float *dinp, const float *dout, int A, int D0, int Bm, int D1, int C);
TRNDEF void trn_slice_forward(float *out, const float *inp, int N, int C, int start, int len);
TRNDEF void trn_slice_backward(float *dinp, const float *dout, int N, int C, int start, int len);
TRNDEF void trn_concat_forward(float *out, const float *a, const float *b, int N, int Ca, int Cb);
TRNDEF void trn_concat_backward(float *da, float *db, const float *dout, int N, int Ca, int Cb);
TRNDEF void trn_sum_forward(float *out, const float *inp, int N, size_t C, float scale);
TRNDEF void trn_sum_backward(float *dinp, const float *dout, int N, size_t C, float scale);
TRNDEF void trn_bmm_forward(float *out, const float *a, const float *b, int Bt, int M, int N, int K, int ta, int tb);
TRNDEF void trn_bmm_backward(float *da, float *db, const float *dout, const float *a, const float *b, int Bt, int M,
                             int N, int K, int ta, int tb);
TRNDEF void trn_cross_entropy_ex_forward(float *losses, float *lse, const float *logits, const int *targets, int N,
                                        int V, int Vp, float smoothing);
TRNDEF void trn_cross_entropy_ex_backward(float *dlogits, const float *logits, const float *lse, const int *targets,
                                         float dloss, int N, int V, int Vp, float smoothing);
TRNDEF void trn_bce_with_logits_forward(float *losses, const float *x, const float *y, size_t n);
TRNDEF void trn_bce_with_logits_backward(float *dx, const float *x, const float *y, float dloss, size_t n);
TRNDEF void trn_l1_forward(float *losses, const float *pred, const float *target, size_t n);
TRNDEF void trn_l1_backward(float *dpred, const float *pred, const float *target, float dloss, size_t n);
TRNDEF void trn_huber_forward(float *losses, const float *pred, const float *target, float delta, size_t n);
TRNDEF void trn_huber_backward(float *dpred, const float *pred, const float *target, float delta, float dloss, size_t n);

/* The kernels' old names (deprecated, kept for one release): a kernel is
   named after its tape op, so trn_linear finds trn_linear_forward. */
#define trn_matmul_forward trn_linear_forward
#define trn_matmul_backward trn_linear_backward
#define trn_crossentropy_forward trn_cross_entropy_forward
#define trn_crossentropy_backward trn_cross_entropy_backward
#define trn_crossentropy_ex_forward trn_cross_entropy_ex_forward
#define trn_crossentropy_ex_backward trn_cross_entropy_ex_backward
#define trn_meanpool_forward trn_mean_pool_forward
#define trn_meanpool_backward trn_mean_pool_backward
#define trn_bce_logits_forward trn_bce_with_logits_forward
#define trn_bce_logits_backward trn_bce_with_logits_backward
#define trn_attention_kv_forward trn_attention_cached_forward

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
    int iarg[6];
    float farg[4];
} trn_tape_entry;

/* a bump allocator over one block of backend memory; see trn_reset */
typedef struct trn_arena {
    char *base;                /* the block (backend memory)               */
    size_t cap, used;
    size_t high;               /* most bytes ever asked for in one step    */
    char **spill; int n_spill; /* blocks added when a step outgrew the base */
    size_t spilled;            /* bytes in those blocks                    */
} trn_arena;

/* the gradients of activations: first-fit over one block, each span freed
   when its tensor's producer has run backward; see trn__grad */
typedef struct trn_grad_span { size_t off, bytes; char *ptr; } trn_grad_span;
typedef struct trn_grad_arena {
    char *base; size_t cap;    /* the block (backend memory, ACT_GRADS)     */
    trn_grad_span *live;       /* spans in use, sorted by offset            */
    int n_live, cap_live;
    size_t high;               /* highest end offset any step has used      */
    size_t handed_out;         /* bytes ever handed out (--profile's count)  */
} trn_grad_arena;

/* a recompute region (see trn_recompute): fn(m, x, user) records ops */
typedef trn_tensor *(*trn_region_fn)(struct trn_model *m, trn_tensor *x, void *user);
typedef struct trn_region {
    trn_region_fn fn;
    void *user;
    uint64_t rng_state;        /* m->rng at region entry, restored to re-run */
} trn_region;

/* The model. The fields at the top are the ones a reader of the step
   meets; the tape's bookkeeping follows; the hooks that train_nccl.h and
   the sync-free step fill, and the bf16 copy of the weights, sit in named
   sub-structs (m.shard, m.sync_free, m.mp) that a program never touches. */
typedef struct trn_model {
    const trn_backend *backend; /* whose kernels run the ops: CPU or CUDA   */
    trn_tensor **params;       /* the parameter table, in declaration order */
    int n_params;
    size_t n_floats;           /* total parameter elements                  */
    float *param_data;         /* ONE buffer with every weight (WEIGHTS)    */
    float *grad_data;          /* ONE buffer, same layout (GRADS); NULL until
                                  the first backward, as in PyTorch         */
    trn_arena arena;           /* activations of one step (ACTIVATIONS)     */
    trn_tape_entry *tape;      /* the ops of this step, in order            */
    int tape_len;
    int grad_enabled;          /* 0: no tape (evaluation), like no_grad     */
    int training;              /* 1: training mode (dropout drops); 0: eval */
    trn_rng rng;               /* for ops that draw random numbers (dropout):
                                  draw from m->rng, never a private RNG; it is
                                  saved in checkpoints and trn_recompute
                                  replays the same numbers. Seeded with 0 by
                                  trn_model_init: reseed it for another */
    int act_dtype;             /* the backend's: TRN_F32, or TRN_BF16 (bf16
                                  precision: activations, their gradients
                                  and the weights' copy m.mp.param_bf16)   */
    int attention_materialized; /* 1: trn_attention keeps the (B,NH,T,T)
                                  probabilities (the reference pair) instead
                                  of running the fused kernels: more memory,
                                  and faster on a GPU until the fused CUDA
                                  kernels use tensor cores (README, CUDA) */
    struct trn_profile *profile; /* --profile: time and bytes per op kind
                                    (trn_profile_attach); NULL: off      */

    /* the tape's bookkeeping */
    int cap_params, tape_cap;
    trn_tensor **tblocks;      /* host-side headers of this step's tensors  */
    int n_tblocks, t_used;
    trn_grad_arena grads;      /* activation gradients (ACT_GRADS)          */
    trn_region *regions;       /* this step's recompute regions (host)      */
    int n_regions, cap_regions;

    /* >>sharding hooks: what train_nccl.h installs (NULL/0 otherwise).
       backward_hook: called by trn_backward after tape entry i (i =
       tape_len-1 down to 0) has run, the tape still intact (DDP starts
       all-reducing a gradient bucket as soon as it is complete).
       backward_pre_hook: called BEFORE tape entry i runs (ZeRO-2 points a
       parameter's grad at a staging buffer before the first entry that
       writes it). grad_lo/grad_hi, param_lo/param_hi: the slice of
       grad_data / param_data that exists in this process when only a
       shard is kept (the pointers are then shard - lo, so element j is
       still grad_data[j] for j in the slice); 0,0: all of it. trn_zero_grad,
       trn_grad_norm and trn_model_free touch only the slice. unit_hook:
       see trn_unit (FSDP); unit_cur: the unit the forward is in (NULL: none) */
    struct {
        void (*backward_hook)(struct trn_model *m, int i, void *user);
        void (*backward_pre_hook)(struct trn_model *m, int i, void *user);
        void *backward_hook_user;
        size_t grad_lo, grad_hi, param_lo, param_hi;
        void (*unit_hook)(struct trn_model *m, struct trn_tensor *member, int phase, void *user);
        void *unit_hook_user;
        struct trn_tensor *unit_cur;
    } shard;
    /* >>sync-free step: the state that lets a step run with one host wait */
    struct {
        const trn_tensor *grad_one; /* during trn_backward: the loss it started
                                       from, whose gradient is known (no download) */
        float grad_one_value;  /* that gradient (trn_backward_scaled's scale) */
        float *gstat;          /* backend memory: [0] grad norm, [1] clip
                                  factor, from trn_clip_grad_norm_async     */
        int clip_pending;      /* 1: the next trn_adamw_step applies gstat[1] */
    } sync_free;
    /* mixed precision (bf16, train_cuda.h): the bf16 copy of every weight,
       same layout (WEIGHTS_BF16); params' data point here, AdamW rewrites
       it in its pass; NULL in fp32. stale: param_data changed outside
       AdamW, the copy is refreshed by the next trn_reset */
    struct {
        void *param_bf16;
        int param_bf16_stale;
    } mp;
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
/* backward with d(loss)/d(loss) = scale instead of 1: gradient accumulation
   over K micro-batches calls it with scale 1/K (as loss/K in PyTorch) */
TRNDEF void trn_backward_scaled(trn_model *m, trn_tensor *loss, float scale);

/* PyTorch's switches, as calls. No grad (torch.no_grad): ops record
   nothing on the tape, so no activation is kept for a backward; returns
   the previous state, to restore with trn_set_grad_enabled. Evaluation
   mode (model.eval()): ops that behave differently in training (dropout)
   behave as at inference. The two are independent, as in PyTorch; an
   evaluation pass usually wants both:
       int g = trn_no_grad(&m); trn_eval(&m);
       ... forward ...
       trn_train(&m); trn_set_grad_enabled(&m, g);                         */
TRNDEF int trn_set_grad_enabled(trn_model *m, int enabled);
TRNDEF int trn_no_grad(trn_model *m);        /* = trn_set_grad_enabled(m, 0) */
TRNDEF void trn_train(trn_model *m);         /* training mode (the default)  */
TRNDEF void trn_eval(trn_model *m);          /* evaluation mode              */

/* >>units: where a block starts (for train_nccl.h's FSDP; harmless
   elsewhere). trn_unit(m, member): the ops that follow belong to the
   block ("unit") that parameter `member` belongs to; NULL: to no block.
   It calls m->shard.unit_hook(m, member, TRN_UNIT_FORWARD, user) at once, so a
   hook can fetch the block's weights before its first op runs, and puts
   a marker on the tape; when trn_backward passes that marker (the block's
   backward is done) it calls unit_hook(m, prev, TRN_UNIT_BACKWARD, user),
   prev being the unit active before the block (NULL: none), whose
   backward comes next. A model calls it once per block in its forward:
       for (l = 0; l < L; l++) { trn_unit(m, h[l].ln1_w); ...block... }
       trn_unit(m, NULL);
   Without a hook it costs one marker per block. */
enum { TRN_UNIT_FORWARD = 0, TRN_UNIT_BACKWARD = 1 };
TRNDEF void trn_unit(trn_model *m, trn_tensor *member);

/* activations: a tensor in the arena (data uninitialized, grad NULL) */
TRNDEF trn_tensor *trn_tensor_new(trn_model *m, const char *name, int ndim, const int *shape);
/* the same in a given dtype: trn_tensor_new makes the model's activation
   dtype (m->act_dtype); a loss or a statistic under bf16 wants TRN_F32 */
TRNDEF trn_tensor *trn_tensor_new_dtype(trn_model *m, const char *name, int ndim, const int *shape, int dtype);
/* bf16 precision: you wrote parameter memory yourself (not through
   trn_write, trn_init_*, a checkpoint load or AdamW, which know): the
   weights' bf16 copy is refreshed before the next op reads it */
TRNDEF void trn_params_changed(trn_model *m);
/* a leaf from host data (inputs, targets): no gradient */
TRNDEF trn_tensor *trn_input(trn_model *m, const char *name, int ndim, const int *shape,
                             const float *host);
/* raw scratch from the arena (ids, saved statistics) */
TRNDEF void *trn_arena_alloc(trn_model *m, size_t bytes);
TRNDEF float trn_item(trn_model *m, const trn_tensor *t);        /* t->data[0] */
/* read/write convert: host memory is always float; a bf16 tensor's values
   are rounded (to nearest even) on the way in. A parameter's are its fp32
   master weights. */
TRNDEF void trn_read(trn_model *m, const trn_tensor *t, float *host);
TRNDEF void trn_write(trn_model *m, trn_tensor *t, const float *host);
TRNDEF void trn_read_grad(trn_model *m, const trn_tensor *t, float *host);
/* elements [offset, offset+n) of t only (a row of logits, the padding rows
   of an embedding), converting as trn_read/trn_write do */
TRNDEF void trn_read_range(trn_model *m, const trn_tensor *t, size_t offset, float *host, size_t n);
TRNDEF void trn_write_range(trn_model *m, trn_tensor *t, size_t offset, const float *host, size_t n);
/* elements [lo, lo+n) of the flat weight buffer (every parameter, in
   declaration order: param_data) to or from host memory, wherever the
   model lives (a checksum of the weights, a model moved to a device) */
TRNDEF void trn_read_params(trn_model *m, size_t lo, float *host, size_t n);
TRNDEF void trn_write_params(trn_model *m, size_t lo, const float *host, size_t n);
TRNDEF void trn_init_normal(trn_model *m, trn_tensor *t, float mean, float std, trn_rng *rng);
TRNDEF void trn_init_const(trn_model *m, trn_tensor *t, float value);

/* ops that record themselves on the tape. Shapes: last dim is channels. */
/* kernels: trn_linear_forward, trn_linear_backward (>>ops; the plain loops _ref sit above them) */
TRNDEF trn_tensor *trn_linear(trn_model *m, trn_tensor *x, trn_tensor *w, trn_tensor *b);
/* kernels: trn_embedding_forward, trn_embedding_backward (>>ops) */
TRNDEF trn_tensor *trn_embedding(trn_model *m, trn_tensor *table, const int *ids, int B, int T);
/* kernels: trn_layernorm_forward, trn_layernorm_backward (>>ops) */
TRNDEF trn_tensor *trn_layernorm(trn_model *m, trn_tensor *x, trn_tensor *w, trn_tensor *b);
/* kernels: trn_gelu_forward, trn_gelu_backward (>>ops) */
TRNDEF trn_tensor *trn_gelu(trn_model *m, trn_tensor *x);
/* GPT-2's feed-forward in one call: linear(gelu(linear(x, fc_w, fc_b)),
   proj_w, proj_b), x (...,C), fc_w (H,C), proj_w (OC,H), biases or NULL.
   The same math as the three calls, in a form a device can fuse: GELU in
   the first GEMM's epilogue, its backward in the epilogue of the GEMM that
   makes d(gelu) (see >>mlp) */
/* kernels: trn_linear_forward + trn_gelu_forward; backward trn_matmul_dgelu_backward,
   trn_linear_backward (>>ops, >>mlp) */
TRNDEF trn_tensor *trn_mlp(trn_model *m, trn_tensor *x, trn_tensor *fc_w, trn_tensor *fc_b, trn_tensor *proj_w,
                           trn_tensor *proj_b);
/* kernels: trn_relu_forward, trn_relu_backward (>>ops) */
TRNDEF trn_tensor *trn_relu(trn_model *m, trn_tensor *x);
/* kernels: trn_add_forward; backward trn_accumulate (>>ops) */
TRNDEF trn_tensor *trn_add(trn_model *m, trn_tensor *a, trn_tensor *b);
/* a + b written over b's memory (the residual add: x = x + proj(h)), one
   activation fewer kept for the step. b must be an activation that no
   backward reads: its producer is linear, layernorm, gelu, embedding,
   add or trn_mlp, no op has used it yet (checked), and nothing uses it afterwards
   (your part: its values are gone) */
/* kernels: trn_add_forward; backward trn_accumulate (>>ops) */
TRNDEF trn_tensor *trn_add_inplace(trn_model *m, trn_tensor *a, trn_tensor *b);
/* the residual add and the layernorm after it: *sum = a + b (over b's
   memory, as trn_add_inplace, with its rules for b), returns
   layernorm(*sum, w, bias). The same math as trn_add_inplace then
   trn_layernorm; a backend with the >>addln entries (CUDA) runs both in
   one pass forward, and backward hands the residual's gradient to b in
   the layernorm's backward pass instead of a copy after it */
/* kernels: trn_add_forward + trn_layernorm_forward; backward trn_layernorm_backward, a copy (>>ops, >>addln) */
TRNDEF trn_tensor *trn_add_layernorm(trn_model *m, trn_tensor *a, trn_tensor *b, trn_tensor *w, trn_tensor *bias,
                                     trn_tensor **sum);
/* kernels: trn_flash_attention_forward, trn_flash_attention_backward (>>ops: tiled, the default); the
   readable reference is trn_attention_forward, trn_attention_backward (>>ops;
   m->attention_materialized = 1 runs it) */
TRNDEF trn_tensor *trn_attention(trn_model *m, trn_tensor *qkv, int n_head, int causal);
/* grouped-query attention: qkv (B,T,(n_head+2*n_kv_head)*hs), n_kv_head
   divides n_head; trn_attention is this with n_kv_head = n_head */
/* kernels: as trn_attention */
TRNDEF trn_tensor *trn_attention_gqa(trn_model *m, trn_tensor *qkv, int n_head, int n_kv_head,
                                     int causal);
/* the classifier and its loss at once: mean cross-entropy of x W^T + b
   (x (...,C), w (Vp,C), b (Vp) or NULL) without ever holding the (N,Vp)
   logits; for logits (sampling) use trn_linear */
/* kernels: trn_linear_forward + trn_cross_entropy_forward per chunk of rows; backward
   trn_cross_entropy_backward + trn_linear_backward (>>ops) */
TRNDEF trn_tensor *trn_linear_cross_entropy(trn_model *m, trn_tensor *x, trn_tensor *w, trn_tensor *b,
                                            const int *targets, int n_valid);
/* Activation checkpointing: y = fn(m, x, user), but forward keeps only x
   and y; the activations inside are dropped and backward re-runs fn from x
   to rebuild them (one more forward of the region: ~1/3 more FLOPs). fn must
   be a pure function of x, the parameters and m->rng (restored for the
   re-run), and must not call trn_reset or trn_backward. The gradients are
   bit-identical to running fn plainly. With a DDP backward_hook installed,
   a step with regions all-reduces after backward, not during it. */
/* kernels: fn's own ops, run again in backward */
TRNDEF trn_tensor *trn_recompute(trn_model *m, trn_region_fn fn, void *user, trn_tensor *x);
/* kernels: trn_cross_entropy_forward, trn_cross_entropy_backward (>>ops) */
TRNDEF trn_tensor *trn_cross_entropy(trn_model *m, trn_tensor *logits, const int *targets,
                                     int n_valid);
/* kernels: trn_mse_forward, trn_mse_backward (>>ops) */
TRNDEF trn_tensor *trn_mse(trn_model *m, trn_tensor *pred, const float *target);
/* kernels: trn_mean_pool_forward, trn_mean_pool_backward (>>ops) */
TRNDEF trn_tensor *trn_mean_pool(trn_model *m, trn_tensor *x);
/* >>ops2 on the tape. trn_mul: b has a's shape, or a's last dim (one row
   broadcast over a's rows, e.g. a learnable gate). trn_softmax: over the
   last dim. trn_rmsnorm: x * w / sqrt(mean(x^2) + eps) per row, w (C),
   eps as the model's config says (Llama: 1e-5 or 1e-6). trn_rope: RoPE
   (Su et al. 2021) in Hugging Face's rotate-half form on packed attention
   input qkv (B,T,(NH+2*NKV)*hs): q heads, then k heads, then v heads; q and
   k heads are rotated, v heads copied; theta is the config's rope_theta;
   row t is position pos0 + t (0 when training; a KV cache passes the
   number of tokens it already holds). trn_rope_scaled: the same with the
   frequencies of a scaled RoPE (Llama 3.1's, linear, dynamic: see
   trn_rope_scaling; NULL = trn_rope). */
/* kernels: trn_mul_forward, trn_mul_backward (>>ops2) */
TRNDEF trn_tensor *trn_mul(trn_model *m, trn_tensor *a, trn_tensor *b);
/* kernels: trn_silu_forward, trn_silu_backward (>>ops2) */
TRNDEF trn_tensor *trn_silu(trn_model *m, trn_tensor *x);
/* kernels: trn_sigmoid_forward, trn_sigmoid_backward (>>ops2) */
TRNDEF trn_tensor *trn_sigmoid(trn_model *m, trn_tensor *x);
/* kernels: trn_tanh_forward, trn_tanh_backward (>>ops2) */
TRNDEF trn_tensor *trn_tanh(trn_model *m, trn_tensor *x);
/* kernels: trn_softmax_forward, trn_softmax_backward (>>ops2) */
TRNDEF trn_tensor *trn_softmax(trn_model *m, trn_tensor *x);
/* kernels: trn_rmsnorm_forward, trn_rmsnorm_backward (>>ops2) */
TRNDEF trn_tensor *trn_rmsnorm(trn_model *m, trn_tensor *x, trn_tensor *w, float eps);
/* kernels: trn_rope_forward, trn_rope_backward (>>ops2) */
TRNDEF trn_tensor *trn_rope(trn_model *m, trn_tensor *qkv, int n_head, int n_kv_head, float theta, int pos0);
TRNDEF trn_tensor *trn_rope_scaled(trn_model *m, trn_tensor *qkv, int n_head, int n_kv_head, float theta,
                                   const trn_rope_scaling *sc, int pos0);
/* (>>ops3's tape ops, dropout to Huber, are in extras/train_ops.h) */

/* ------------------------------------------------------------------------
   >>opapi
   Your own op, in your own file, with public names only. An op is a
   forward and a backward function that both take the tape entry e:
      e->out        the output tensor (made by you with trn_tensor_new)
      e->in[0..2]   the inputs (NULL where unused)
      e->iarg/farg  small arguments, copied from trn_op_args
      e->saved[0..2] what forward keeps for backward: forward stores
                    pointers from trn_arena_alloc there (or nothing)
   Forward writes e->out->data. Backward ACCUMULATES (+=) into
   trn_grad(m, e->in[i]), reading the output's gradient trn_grad(m, e->out).
   A trn_op holds the functions for each place: forward/backward run when
   the model's backend is on the host (the CPU backend), cuda_forward /
   cuda_backward when it is on the device (train_cuda.h); NULL there means
   "not available on CUDA" and stops with a message naming the op. Under
   train_cuda.h's bf16 precision, tensors made by trn_tensor_new hold bf16
   (t->dtype == TRN_BF16; parameters' data is their bf16 copy, their
   gradients fp32): an op says it handles that with .bf16 = 1.
   trn_op_apply runs forward and records the op on the tape, the one call
   the kit's own ops use too (see trn_relu). Example: README "Your own op"
   and examples/custom_op.c (Swish with a learnable beta).
   ------------------------------------------------------------------------ */
typedef trn_backward_fn trn_op_fn;   /* void f(trn_model *m, trn_tape_entry *e) */

typedef struct trn_op {
    const char *name;                /* shows in errors and on the tape       */
    trn_op_fn forward, backward;     /* host kernels (CPU backend)            */
    trn_op_fn cuda_forward, cuda_backward; /* device kernels; NULL: none      */
    int bf16;                        /* 1: the kernels also handle bf16
                                        tensors (bf16 precision: they read
                                        t->dtype); 0 (a default that leaves
                                        it out): fp32 only, and trn_op_apply
                                        stops on a bf16 model              */
} trn_op;

typedef struct trn_op_args {         /* zero = none; copied into the entry   */
    int i[6];                        /* -> e->iarg[0..5] */
    float f[4];                      /* -> e->farg[0..3] */
} trn_op_args;

/* run op->forward for the model's place and record the op on the tape (when
   the tape is on and some input requires a gradient; out->requires_grad is
   set accordingly). a, b, c: inputs, NULL where unused; args may be NULL.
   Returns the entry forward saw: e->saved holds what forward kept. When the
   op is not recorded the entry is a scratch copy, valid until the next op. */
TRNDEF trn_tape_entry *trn_op_apply(trn_model *m, const trn_op *op, trn_tensor *out, trn_tensor *a,
                                    trn_tensor *b, trn_tensor *c, const trn_op_args *args);
/* the gradient buffer backward accumulates into (backend memory, zeroed the
   first time it is asked for), or NULL when t is NULL or needs no gradient.
   The only way an op reaches a gradient: activation gradients are the
   kit's to place and to free. */
TRNDEF float *trn_grad(trn_model *m, trn_tensor *t);

/* Finite-difference check of every parameter's gradient, for any op or
   model. build() runs a forward on m and returns a tensor y; the checker
   probes the scalar L = sum_i r_i * y_i (r fixed random normals; r = 1 when
   y is a scalar), computes L's gradient with trn_backward, and compares it
   with (L(p + eps) - L(p - eps)) / 2eps (L summed in double on the host)
   for up to max_per_param elements of each parameter. A gradient passes
   when |analytic - numeric| <= atol + rtol * |numeric|. Works on any
   backend (it uses trn_read / trn_write). To check an input's gradient,
   make the input a parameter of a test model. It zeroes the gradients and
   rewinds the arena (trn_reset): call it between steps, not inside one. */
typedef struct trn_gradcheck_desc {
    float eps;            /* default 1e-2 (float32: smaller is noisier)   */
    float atol, rtol;     /* default 1e-3, 2e-2                           */
    int max_per_param;    /* elements probed per parameter, default 32    */
    uint64_t seed;        /* for r and the elements probed, default 1     */
    int verbose;          /* 1: one line per parameter; failures always   */
} trn_gradcheck_desc;

typedef struct trn_gradcheck_result {
    int checked, failed;  /* gradient elements compared / out of tolerance */
    double worst;         /* largest |a - n| / (atol + rtol*|n|): <= 1 passes */
    double largest;       /* largest |analytic gradient| seen (0: nothing tested) */
} trn_gradcheck_result;

TRNDEF trn_gradcheck_desc trn_gradcheck_defaults(const trn_gradcheck_desc *desc);
/* returns the number of failed elements (0: all pass); res may be NULL */
TRNDEF int trn_gradcheck(trn_model *m, trn_tensor *(*build)(trn_model *m, void *user), void *user,
                         const trn_gradcheck_desc *desc, trn_gradcheck_result *res);

/* ------------------------------------------------------------------------
   >>adamw
   The optimizer: AdamW (default) or SGD with momentum, in one struct (it
   keeps its first name, trn_adamw), stepped by trn_adamw_step, saved and
   restored by trn_checkpoint_save/load. Weight decay, as PyTorch has it:
     AdamW: decoupled, p -= lr * wd * p beside the Adam update;
     SGD:   L2, g += wd * p before momentum (torch.optim.SGD).
   A weight decay of 0 is 0: in a desc, weight_decay is taken as written.
   Only desc == NULL gives PyTorch's AdamW default of 0.01. (Earlier, a 0
   in the desc meant "default"; code that relied on that now gets 0.)
   ------------------------------------------------------------------------ */
typedef enum trn_optim_algo {
    TRN_OPTIM_ADAMW = 0, /* Loshchilov & Hutter 2019, torch.optim.AdamW     */
    TRN_OPTIM_SGD = 1    /* torch.optim.SGD: momentum, dampening, Nesterov */
} trn_optim_algo;

typedef struct trn_optimizer_desc {
    float lr;            /* default 1e-3 (PyTorch's default)               */
    float beta1, beta2;  /* AdamW: default 0.9, 0.999                       */
    float eps;           /* AdamW: default 1e-8                             */
    float weight_decay;  /* as written, 0 = none (desc NULL: 0.01); applies
                            where tensor->decay is set (see trn_param_group) */
    int no_weight_decay; /* 1: weight_decay = 0 (older code's spelling)     */
    trn_optim_algo algo; /* TRN_OPTIM_ADAMW (0) or TRN_OPTIM_SGD            */
    float momentum;      /* SGD: 0 = plain SGD (no buffer), e.g. 0.9        */
    float dampening;     /* SGD: buf = momentum*buf + (1-dampening)*g; 0    */
    int nesterov;        /* SGD: 1 = Nesterov (momentum > 0, dampening 0)   */
} trn_optimizer_desc;

typedef struct trn_optimizer {
    trn_optimizer_desc desc; /* effective values                           */
    float *m, *v;        /* moments, NULL until the first step (OPTIM)     */
    size_t lo, hi;       /* the slice of the flat buffers this optimizer
                            owns: all by default, one shard for ZeRO-1     */
    long long step;      /* steps taken                                    */
    const trn_backend *backend;
} trn_optimizer;
/* the old names (kept): the optimizer runs AdamW or SGD (desc.algo), its
   calls keep the trn_adamw_ prefix */
typedef trn_optimizer trn_adamw;
typedef trn_optimizer_desc trn_adamw_desc;

TRNDEF trn_optimizer_desc trn_adamw_defaults(const trn_optimizer_desc *desc);
TRNDEF void trn_adamw_init(trn_optimizer *opt, const trn_optimizer_desc *desc);
/* one step over every parameter. kernels: trn_adamw_update (trn_adamw_update_ref,
   the plain loop, directly above it) or trn_sgd_update, both in >>adamw */
TRNDEF trn_result trn_adamw_step(trn_optimizer *opt, trn_model *m, float lr);
TRNDEF void trn_adamw_free(trn_optimizer *opt);
/* Parameter groups: every parameter whose name matches `pattern` ('*'
   matches any run of characters: "*.bias", "h.*.ln_*", "wte.weight") gets
   learning rate lr * lr_scale and, if weight_decay >= 0, that weight decay
   exactly (0 = none), whatever its decay flag and the optimizer's value;
   weight_decay < 0 leaves the tensor's decay as it was. Later calls win.
   Returns how many parameters matched; none is a programmer error (a
   typo), trn_fatal. Not saved in checkpoints: set the same groups before
   resuming, as you build the same model. */
TRNDEF int trn_param_group(trn_model *m, const char *pattern, float lr_scale, float weight_decay);

/* Learning-rate schedules, each with a linear warmup: for step < warmup the
   lr is max_lr * (step+1) / warmup, then
     COSINE    max_lr -> min_lr along half a cosine, reached at total
     CONSTANT  max_lr forever (total and min_lr unused)
     LINEAR    max_lr -> min_lr in a straight line, reached at total
     WSD       warmup-stable-decay: max_lr until the last decay_frac of the
               steps after warmup, then a straight line to min_lr at total
   At and after total: min_lr (CONSTANT: max_lr). Step counts from 0. */
typedef enum trn_schedule_kind {
    TRN_SCHEDULE_COSINE = 0, TRN_SCHEDULE_CONSTANT, TRN_SCHEDULE_LINEAR, TRN_SCHEDULE_WSD
} trn_schedule_kind;
typedef struct trn_schedule {
    trn_schedule_kind kind;
    long long warmup, total;
    float max_lr, min_lr;
    float decay_frac;    /* WSD: 0 means 0.2 (the last 20% decay)          */
} trn_schedule;
TRNDEF float trn_schedule_lr(const trn_schedule *s, long long step);
/* deprecated (the one schedule function is trn_schedule_lr): the cosine
   schedule in one call, = trn_schedule_lr(&{COSINE, warmup, total, max_lr,
   min_lr}, step) */
TRNDEF float trn_lr_schedule(long long step, long long warmup, long long total,
                             float max_lr, float min_lr);
/* "cosine" ... "wsd" -> the kind; -1 for anything else (for flag parsers) */
TRNDEF int trn_schedule_parse(const char *name);
TRNDEF const char *trn_schedule_name(trn_schedule_kind kind);
TRNDEF float trn_grad_norm(trn_model *m);
/* scale grads so their global L2 norm is <= max_norm; returns the norm before */
TRNDEF float trn_clip_grad_norm(trn_model *m, float max_norm);

/* The same step without waiting for the device (CUDA: one host wait per
   step, in trn_sync). trn_clip_grad_norm_async computes the norm and the
   clip factor where the gradients live; the next trn_adamw_step multiplies
   each gradient by that factor inside its one pass over the buffers (so
   between the two calls the gradients are not yet scaled; the step stores
   them scaled, in its slice of the buffers). *norm_out (may be NULL) holds
   the norm once trn_sync returns. trn_backward drops a factor that no
   step used (it belongs to the gradients it was computed from). On a
   backend without the device path (the CPU) this is trn_clip_grad_norm,
   and *norm_out is set at once. */
TRNDEF void trn_clip_grad_norm_async(trn_model *m, float max_norm, float *norm_out);
/* queue t->data[0] to *dst, which holds it once trn_sync returns: the
   loss of a step, read without stopping the device (trn_item waits) */
TRNDEF void trn_item_async(trn_model *m, const trn_tensor *t, float *dst);
/* wait until the device has done everything queued: the async values
   have landed. The one host synchronization of a training step. */
TRNDEF void trn_sync(trn_model *m);
/* What a training program needs beside the step, so that it never reaches
   into the backend table or the gradient ranges itself:
   trn_scale_grads    grads *= s over the gradients this rank holds (all of
                      them; a ZeRO-2/FSDP shard's slice): the 1/K after K
                      micro-batches of gradient accumulation
   trn_backend_name   "cpu", "cuda": for the lines a program prints
   trn_last_position  x (B,T,C) -> its last position x[:, T-1, :], (B,1,C),
                      a copy in the arena that is not recorded on the tape
                      (generation: the LM head needs only the last row) */
TRNDEF void trn_scale_grads(trn_model *m, float s);
TRNDEF const char *trn_backend_name(const trn_model *m);
TRNDEF trn_tensor *trn_last_position(trn_model *m, trn_tensor *x);

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
   slice [lo,hi) of the flat layout; SGD: its momentum buffer as "optim.m"
   alone) and, in __metadata__, the optimizer step and hyperparameters
   ("trn.optim.*"; "trn.optim.algo" = "sgd" for SGD), the model's RNG
   (dropout's masks, "trn.model.rng") plus the caller's trn_meta:
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
#define TRN_META_MAX 64   /* pairs                                        */
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
   metadata except the kit's own keys. A wrong name or shape is found in
   the header and leaves the model untouched; after a data error (CRC,
   I/O) the weights are partly overwritten: do not use them. A training
   checkpoint is refused here (extra optim.m/v): load its weights with
   trn_checkpoint_load(path, m, NULL, NULL). */
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
    const char **meta_key, **meta_val; /* __metadata__, sorted by key     */
    int n_meta;
    int has_crc;             /* the file carries trn.crc32c               */
    uint32_t crc_stored;     /* its value                                 */
    uint32_t crc_header;     /* CRC-32C of the header's content           */
    size_t crc_pos;          /* where its 8 hex digits sit in the header  */
    char *pool;              /* decoded strings                           */
} trn_safetensors;

TRNDEF trn_result trn_safetensors_open(trn_safetensors *f, const char *path);
TRNDEF void trn_safetensors_close(trn_safetensors *f);
/* a file about to be read is a regular file: a FIFO would block the
   reader forever, a directory or a device is no file of ours. TRN_OK, or
   TRN_ERR_IO with "PATH: a FIFO, not a regular file" (errno as stat's when
   it failed). Every reader of the kit calls it before fopen. */
TRNDEF trn_result trn_check_regular(const char *path);
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
   the next trn_adamw_step continues the run bit for bit. A program that
   lets its flags change the hyperparameters on resume (a new weight
   decay) sets opt->desc after the load: that is what the next steps use
   and what the next checkpoint records (examples/gpt2 does this). The file's
   checksum is required and verified. meta_out (may be NULL) receives the
   keys you saved. Errors as for trn_safetensors_load. */
TRNDEF trn_result trn_checkpoint_save(const char *path, trn_model *m, const trn_adamw *opt,
                                      const trn_meta *meta);
TRNDEF trn_result trn_checkpoint_load(const char *path, trn_model *m, trn_adamw *opt,
                                      trn_meta *meta_out);
/* header valid, a train.h checkpoint, checksum right (reads the file) */
TRNDEF trn_result trn_checkpoint_verify(const char *path);

/* Create DIR and the parents it lacks (like mkdir -p; mode 0755). TRN_OK
   also when DIR exists; TRN_ERR_IO names the part that could not be made
   (or that exists but is not a directory). */
TRNDEF trn_result trn_mkdirs(const char *dir);
/* <<checkpoint declarations end */



/* ------------------------------------------------------------------------
   >>profile declarations
   Profile (torch.profiler's key_averages): time and arena bytes per op
   kind, forward and backward, summed over every backward pass. The tape
   takes the marks (here, in the core); extras/train_loop.h prints them.
      trn_profile prof;  trn_profile_attach(&prof, &model);
      ... train ...  trn_profile_print(&prof, stdout);  trn_profile_free(&prof);
   The tape takes a time mark at trn_reset, at each op's record (its
   forward has just run: an op's forward time is the time since the
   previous mark) and around each backward call; the marks are read at the
   end of trn_backward. Bytes are what the op took from the activation
   arena (outputs and what it saves; in backward, gradients). The clock is
   the host's (after a backend sync on a device backend); train_cuda.h's
   trn_cuda_profile_clock(&prof) installs CUDA events, which need no sync.
   Off (model.profile == NULL) the tape pays one pointer test per op. */
#define TRN_PROFILE_MAX_OPS 64
typedef struct trn_profile_row {
    const char *op;
    long long calls[2];  /* [0] forward, [1] backward                      */
    double ms[2];
    double bytes[2];
} trn_profile_row;
struct trn__pmark;
typedef struct trn_profile {
    trn_profile_row rows[TRN_PROFILE_MAX_OPS];
    int n_rows;
    long long passes;    /* backward passes profiled                        */
    const char *clock_name;                                /* "host clock" */
    void (*mark)(struct trn_profile *p, int i);            /* NULL: host   */
    void (*read)(struct trn_profile *p, int n, double *ms); /* ms[i]: mark i-1 -> i */
    void (*clock_free)(struct trn_profile *p);
    void *clock;                                           /* its state    */
    /* internal: the marks of the pass in progress */
    struct trn__pmark *marks;
    double *ms;
    int n_marks, cap_marks, cap_ms, in_backward;
    struct trn_model *model;
} trn_profile;
TRNDEF void trn_profile_attach(trn_profile *p, struct trn_model *m);
TRNDEF void trn_profile_free(trn_profile *p); /* detaches it from the model */
/* <<profile declarations end */

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
#include <pthread.h> /* the ledger's lock (extras/train_run.h's writer thread allocates too) */
#define TRN__HAVE_PTHREAD 1
#endif
#if defined(__GLIBC__) && !defined(__USE_XOPEN2K8)
#error "train.h: POSIX 2008 is off in this file: #include \"train.h\" before any other header (it turns POSIX on itself), or compile with -D_DEFAULT_SOURCE"
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
/* element i of backend memory p holding dtype dt (bf16 elements are 2 bytes) */
#define TRN__AT(p, i, dt) ((float *)((char *)(p) + (size_t)(i) * trn_dtype_size(dt)))
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

/* formatted into a scratch buffer, then copied: the arguments may be
   trn_error_reason() itself (a failure that wraps the one below it) */
TRNDEF trn_result trn_fail(trn_result r, const char *fmt, ...) {
    char msg[sizeof trn__reason];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    memcpy(trn__reason, msg, sizeof msg);
    return r;
}

TRNDEF void trn_fatal(const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fflush(stdout);
    fprintf(stderr, "train.h: %s\n", msg); /* one write: lines from ranks don't interleave */
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
#if !defined(_OPENMP) && defined(TRN__HAVE_PTHREAD)
static pthread_mutex_t trn__ledger_mutex = PTHREAD_MUTEX_INITIALIZER;
#endif

TRNDEF const char *trn_kind_name(trn_kind kind) {
    const char *name = "?";
    switch (kind) { /* by name: kinds get added, indices move */
    case TRN_KIND_WEIGHTS: name = "weights"; break;
    case TRN_KIND_GRADS: name = "gradients"; break;
    case TRN_KIND_OPTIM: name = "optimizer"; break;
    case TRN_KIND_ACTIVATIONS: name = "activations"; break;
    case TRN_KIND_ACT_GRADS: name = "act_grads"; break;
    case TRN_KIND_TEMP: name = "temporary"; break;
    case TRN_KIND_COMM: name = "communication"; break;
    case TRN_KIND_KV_CACHE: name = "kv cache"; break;
    case TRN_KIND_RUNTIME: name = "runtime"; break;
    case TRN_KIND_STAGING: name = "staging"; break;
    case TRN_KIND_WEIGHTS_BF16: name = "weights bf16"; break;
    default: break;
    }
    return name;
}

TRNDEF void trn_ledger_add(trn_place place, trn_kind kind, long long delta) {
    if (place < 0 || place >= TRN_PLACE_COUNT || kind < 0 || kind >= TRN_KIND_COUNT)
        trn_fatal("trn_ledger_add: bad place %d or kind %d", (int)place, (int)kind);
#ifdef _OPENMP
#pragma omp critical(trn__ledger_lock)
#elif defined(TRN__HAVE_PTHREAD)
    pthread_mutex_lock(&trn__ledger_mutex); /* extras/train_run.h's async writer allocates too */
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
#if !defined(_OPENMP) && defined(TRN__HAVE_PTHREAD)
    pthread_mutex_unlock(&trn__ledger_mutex);
#endif
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
TRNDEF size_t trn_dtype_size(int dtype) { return dtype == TRN_BF16 ? 2 : 4; }
TRNDEF const char *trn_dtype_name(int dtype) { return dtype == TRN_BF16 ? "bf16" : "f32"; }

/* bf16 <-> fp32, bit-exact with the GPU's __float2bfloat16 (round to
   nearest, ties to even; NaN stays a quiet NaN) and __bfloat162float */
static uint16_t trn__f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
static float trn__bf16_to_f32(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float out;
    memcpy(&out, &bits, 4);
    return out;
}
/* n elements from host memory of one dtype to another (the host side of
   trn_read/trn_write and the CPU backend's convert) */
static void trn__convert_host(void *dst, int dt, const void *src, int st, size_t n, int accumulate, float s) {
    size_t i;
    for (i = 0; i < n; i++) {
        float v = st == TRN_BF16 ? trn__bf16_to_f32(((const uint16_t *)src)[i]) : ((const float *)src)[i];
        if (s != 1.0f) v *= s;
        if (accumulate) v += dt == TRN_BF16 ? trn__bf16_to_f32(((uint16_t *)dst)[i]) : ((float *)dst)[i];
        if (dt == TRN_BF16) ((uint16_t *)dst)[i] = trn__f32_to_bf16(v);
        else ((float *)dst)[i] = v;
    }
}

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

TRNDEF void trn_omp_wait_passive(char **argv) {
#if defined(_OPENMP) && defined(__linux__)
    if (!argv || !argv[0] || getenv("OMP_WAIT_POLICY")) return; /* the user's choice, or already done */
    if (setenv("OMP_WAIT_POLICY", "passive", 1) != 0) return;
    fflush(NULL);
    execv("/proc/self/exe", argv); /* returns only on failure: then go on, spinning */
#else
    (void)argv;
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

/* --- helpers that vectorize ------------------------------------------------
   libm's expf and tanhf may set errno, so a compiler will not vectorize a
   loop that calls them (short of -ffast-math); those loops were half of a
   small GPT-2's step (GELU). trn__expf is e^x in plain C that GCC and clang
   vectorize (AVX-512, AVX2, NEON), within 1.5 ulp of expf on [-87, 88]:
   x = n ln2 + r with |r| <= ln2/2; e^r by its Taylor series to r^7 (the
   rest is < 3e-9 relative); 2^n built in the float's exponent bits.
   Below -87 it returns 0 (no denormals), above 88 it returns e^88; NaN
   stays NaN. The clamps compare the float's bits as integers: a float
   compare may trap (on NaN), and GCC without AVX-512's mask registers then
   keeps `x > 88 ? 88 : x` a branch, and the whole loop scalar (it was, on
   AVX2 and NEON). For a float that is not NaN, |x| orders as its bits with
   the sign cleared; bits above those of +inf are NaN.                  */
static inline float trn__expf(float x) {
    float xc, n, r, p, scale;
    int32_t bits, mag, sign, lim, clamp, under;
    memcpy(&bits, &x, sizeof bits);
    mag = bits & 0x7fffffff;
    sign = -(int32_t)(bits < 0);               /* all ones where x < 0 */
    lim = 0x42B00000 - (sign & 0x20000);       /* the bits of 88.0f; of 87.0f where x < 0 */
    clamp = -(int32_t)((mag > lim) & (mag <= 0x7f800000)); /* |x| past the limit, inf too; not NaN */
    under = clamp & sign;                      /* x < -87: the result is 0 */
    bits = (bits & ~clamp) | (((bits & INT32_MIN) | lim) & clamp);
    memcpy(&xc, &bits, sizeof xc);
#ifdef __FAST_MATH__
    n = floorf(xc * 1.44269504f + 0.5f); /* -ffast-math would fold the trick below */
#else
    n = (xc * 1.44269504f + 12582912.0f) - 12582912.0f; /* round: 1.5*2^23 drops the fraction */
#endif
    r = (xc - n * 0.693145752f) - n * 1.42860677e-6f; /* ln 2 in two parts: r is exact */
    p = 1.0f / 5040;
    p = p * r + 1.0f / 720;
    p = p * r + 1.0f / 120;
    p = p * r + 1.0f / 24;
    p = p * r + 1.0f / 6;
    p = p * r + 0.5f;
    p = p * r * r + r + 1.0f;
    bits = ((int32_t)n + 127) << 23; /* the float 2^n */
    memcpy(&scale, &bits, sizeof scale);
    p = p * scale;
    memcpy(&bits, &p, sizeof bits);
    bits &= ~under;
    memcpy(&p, &bits, sizeof p);
    return p;
}

/* min(x, hi) for a positive hi, by the bits as trn__expf does (NaN stays) */
static inline float trn__min_pos(float x, float hi) {
    int32_t b, h, m;
    memcpy(&b, &x, sizeof b);
    memcpy(&h, &hi, sizeof h);
    m = -(int32_t)((b > h) & (b <= 0x7f800000)); /* x > hi (negative x: b < 0) */
    b = (b & ~m) | (h & m);
    memcpy(&x, &b, sizeof x);
    return x;
}

/* Reductions over a row in TRN__LANES independent partial results, which
   the compiler turns into vector registers; the lanes are combined in a
   fixed order, so the result depends only on the input. */
#define TRN__LANES 16
static float trn__row_max(const float *x, int n) {
    float acc[TRN__LANES], mx = -INFINITY;
    int i, j;
    for (j = 0; j < TRN__LANES; j++) acc[j] = -INFINITY;
    for (i = 0; i + TRN__LANES <= n; i += TRN__LANES)
        for (j = 0; j < TRN__LANES; j++) acc[j] = x[i + j] > acc[j] ? x[i + j] : acc[j];
    for (j = 0; j < TRN__LANES; j++) mx = acc[j] > mx ? acc[j] : mx;
    for (; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    return mx;
}

/* sum of e^(x[i] - shift) */
static double trn__row_sum_exp(const float *x, int n, float shift) {
    float acc[TRN__LANES];
    double sum = 0.0;
    int i, j;
    for (j = 0; j < TRN__LANES; j++) acc[j] = 0.0f;
    for (i = 0; i + TRN__LANES <= n; i += TRN__LANES)
        for (j = 0; j < TRN__LANES; j++) acc[j] += trn__expf(x[i + j] - shift);
    for (j = 0; j < TRN__LANES; j++) sum += acc[j];
    for (; i < n; i++) sum += trn__expf(x[i] - shift);
    return sum;
}

static float trn__row_sum(const float *x, int n) {
    float acc[TRN__LANES], sum = 0.0f;
    int i, j;
    for (j = 0; j < TRN__LANES; j++) acc[j] = 0.0f;
    for (i = 0; i + TRN__LANES <= n; i += TRN__LANES)
        for (j = 0; j < TRN__LANES; j++) acc[j] += x[i + j];
    for (j = 0; j < TRN__LANES; j++) sum += acc[j];
    for (; i < n; i++) sum += x[i];
    return sum;
}

static float trn__row_dot(const float *a, const float *b, int n) {
    float acc[TRN__LANES], dot = 0.0f;
    int i, j;
    for (j = 0; j < TRN__LANES; j++) acc[j] = 0.0f;
    for (i = 0; i + TRN__LANES <= n; i += TRN__LANES)
        for (j = 0; j < TRN__LANES; j++) acc[j] += a[i + j] * b[i + j];
    for (j = 0; j < TRN__LANES; j++) dot += acc[j];
    for (; i < n; i++) dot += a[i] * b[i];
    return dot;
}

/* --- linear: out = inp @ w^T + bias ------------------------------------
   inp (N,C), w (OC,C) as PyTorch's nn.Linear stores it, bias (OC) or NULL,
   out (N,OC). Saved for backward: inp and w (they are still alive).
   Backward, the chain rule for y = x W^T + b:
     dinp (N,C)  += dout (N,OC) @ w (OC,C)
     dw   (OC,C) += dout^T (OC,N) @ inp (N,C)
     dbias (OC)  += sum over rows of dout
   The plain loops first (the math, and the reference the tests hold the
   fast pair to); trn_linear_forward/_backward below compute the same with
   trn_sgemm (>>matmul: blocked, vectorized, threaded).                    */
TRNDEF void trn_linear_forward_ref(float *out, const float *inp, const float *w, const float *bias,
                                   int N, int C, int OC) {
    int n, o, c;
    for (n = 0; n < N; n++)
        for (o = 0; o < OC; o++) {
            float acc = bias ? bias[o] : 0.0f;
            for (c = 0; c < C; c++) acc += inp[(size_t)n * C + c] * w[(size_t)o * C + c];
            out[(size_t)n * OC + o] = acc;
        }
}

TRNDEF void trn_linear_backward_ref(float *dinp, float *dw, float *dbias, const float *dout,
                                    const float *inp, const float *w, int N, int C, int OC) {
    int n, o, c;
    for (n = 0; n < N; n++)
        for (o = 0; o < OC; o++) {
            float d = dout[(size_t)n * OC + o];
            for (c = 0; c < C; c++) {
                if (dinp) dinp[(size_t)n * C + c] += d * w[(size_t)o * C + c];
                if (dw) dw[(size_t)o * C + c] += d * inp[(size_t)n * C + c];
            }
            if (dbias) dbias[o] += d;
        }
}

TRNDEF void trn_linear_forward(float *out, const float *inp, const float *w, const float *bias,
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

TRNDEF void trn_linear_backward(float *dinp, float *dw, float *dbias, const float *dout,
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

/* The sums over a row's C channels, in 8 partial sums (element i goes to
   lane i % 8) added pairwise at the end. One running sum is a chain of
   dependent adds, ~4 cycles each; 8 independent lanes let the compiler use
   vector adds (AVX2: 2 x 4 doubles, NEON: 4 x 2), about 5x faster here. The
   order is fixed by the code, so the bits do not depend on the thread
   count or the instruction set. */
static double trn__lanes8_d(const double *s) {
    return ((s[0] + s[4]) + (s[2] + s[6])) + ((s[1] + s[5]) + (s[3] + s[7]));
}
static float trn__lanes8_f(const float *s) {
    return ((s[0] + s[4]) + (s[2] + s[6])) + ((s[1] + s[5]) + (s[3] + s[7]));
}
static double trn__row_sum_d(const float *x, int n) { /* sum x, in double */
    double s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int i = 0, j;
    for (; i + 8 <= n; i += 8)
        for (j = 0; j < 8; j++) s[j] += x[i + j];
    for (; i < n; i++) s[i % 8] += x[i];
    return trn__lanes8_d(s);
}
static double trn__row_sq_d(const float *x, int n, double m) { /* sum (x - m)^2 */
    double s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int i = 0, j;
    for (; i + 8 <= n; i += 8)
        for (j = 0; j < 8; j++) s[j] += (x[i + j] - m) * (x[i + j] - m);
    for (; i < n; i++) s[i % 8] += (x[i] - m) * (x[i] - m);
    return trn__lanes8_d(s);
}

TRNDEF void trn_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                                  const float *w, const float *b, int N, int C) {
    int n;
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        float *y = out + (size_t)n * C;
        double m = trn__row_sum_d(x, C) / C, v = trn__row_sq_d(x, C, m) / C;
        float s;
        int i;
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
            float m = mean[n], s = rstd[n], mg, mgx, sg[8] = {0}, sgx[8] = {0};
            int i = 0, j;
            /* mg = mean(g w), mgx = mean(g w xhat), in 8 lanes as above */
            for (; i + 8 <= C; i += 8)
                for (j = 0; j < 8; j++) {
                    float xhat = (x[i + j] - m) * s, gi = g[i + j] * w[i + j];
                    sg[j] += gi;
                    sgx[j] += gi * xhat;
                }
            for (; i < C; i++) {
                float xhat = (x[i] - m) * s, gi = g[i] * w[i];
                sg[i % 8] += gi;
                sgx[i % 8] += gi * xhat;
            }
            mg = trn__lanes8_f(sg) / C;
            mgx = trn__lanes8_f(sgx) / C;
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
   y = 0.5 x (1 + tanh(u)),  u = k (x + 0.044715 x^3),  k = sqrt(2/pi).
   Computed as y = x s with s = 0.5 (1 + tanh(u)) = 1 / (1 + e^(-2u)), the
   same function through one exp (trn__expf, which vectorizes).
   Saved: the input x (backward recomputes s from it).
   Backward: dy/dx = s + x ds/dx, ds/dx = 2 s (1 - s) k (1 + 3 * 0.044715 x^2)
   (the tanh form's 0.5 (1 - tanh^2(u)) is 2 s (1 - s)).                  */
#define TRN__GELU_K 0.7978845608028654f
static inline float trn__gelu_s(float x) {
    float z = -2.0f * TRN__GELU_K * (x + 0.044715f * x * x * x);
    z = trn__min_pos(z, 80.0f); /* x < -10: s ~ 1e-35, not a denormal */
    return 1.0f / (1.0f + trn__expf(z));
}

TRNDEF void trn_gelu_forward(float *out, const float *inp, size_t n) {
    ptrdiff_t i;
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (i = 0; i < (ptrdiff_t)n; i++) out[i] = inp[i] * trn__gelu_s(inp[i]);
}

static inline float trn__gelu_dx(float x) { /* dy/dx */
    float s = trn__gelu_s(x);
    float ds = 2.0f * s * (1.0f - s) * TRN__GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
    return s + x * ds;
}
TRNDEF void trn_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n) {
    ptrdiff_t i;
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (i = 0; i < (ptrdiff_t)n; i++) dinp[i] += dout[i] * trn__gelu_dx(inp[i]);
}

/* trn_mlp's backward through GELU (>>mlp): dpre (N,C) = (dout (N,OC) @ w
   (OC,C)) * gelu'(pre), WRITTEN: the product straight into dpre, then
   GELU's backward in place. The same numbers as trn_linear_backward into a
   zeroed scratch followed by trn_gelu_backward, without the scratch. */
TRNDEF void trn_matmul_dgelu_backward(float *dpre, const float *dout, const float *w, const float *pre, int N, int C,
                                      int OC) {
    ptrdiff_t i, n = (ptrdiff_t)N * C;
    trn_sgemm(0, 0, N, C, OC, 1.0f, dout, OC, w, C, 0.0f, dpre, C);
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (i = 0; i < n; i++) dpre[i] *= trn__gelu_dx(pre[i]);
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
   qkv (B,T,(NH+2*NKV)*hs): for each position NH query heads, then NKV key
   heads, then NKV value heads, hs channels each. NKV = NH is multi-head
   attention: qkv (B,T,3C) with C = NH*hs, as GPT-2's c_attn writes it.
   NKV < NH is grouped-query attention (Ainslie et al. 2023): the NH/NKV
   query heads of a group share one key/value head; query head h reads kv
   head h/(NH/NKV). out (B,T,NH*hs) with the heads side by side.
   Per (b,h), with Q (T,hs) of head h and K,V (T,hs) of its kv head, all
   strided views into qkv:
     S = Q K^T / sqrt(hs);  P = softmax_rows(S, mask);  O = P V
   This is the materialized REFERENCE. att (B,NH,T,T) is saved for
   backward: the probabilities P (zero above the diagonal when causal).
   Backward (scratch (B,NH,T,T) holds dP, then dS):
     dP = dO V^T;  dV += P^T dO;  dS = P * (dP - rowsum(dP * P));
     dQ += dS K / sqrt(hs);  dK += dS^T Q / sqrt(hs)
   Forward threads split the (b,h) pairs. Backward splits (b, kv head): the
   query heads of a group add into the same dK and dV, so they run one
   after the other on one thread. Each GEMM is single-threaded inside. */
TRNDEF void trn_attention_forward(float *out, float *att, const float *qkv,
                                  int B, int T, int NH, int NKV, int hs, int causal) {
    int bh, ld = (NH + 2 * NKV) * hs, C = NH * hs, group = NH / NKV;
    float scale = 1.0f / sqrtf((float)hs);
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (bh = 0; bh < B * NH; bh++) {
        int b = bh / NH, h = bh % NH, g = h / group, t, s;
        const float *x = qkv + (size_t)b * T * ld;
        const float *q = x + (size_t)h * hs, *k = x + (size_t)(NH + g) * hs;
        const float *v = x + (size_t)(NH + NKV + g) * hs;
        float *P = att + (size_t)bh * T * T;
        trn_sgemm(0, 1, T, T, hs, scale, q, ld, k, ld, 0.0f, P, T);
        for (t = 0; t < T; t++) {
            float *row = P + (size_t)t * T, mx = -INFINITY, sum = 0.0f;
            int last = causal ? t : T - 1; /* causal: position t sees 0..t */
            mx = trn__row_max(row, last + 1);
            for (s = 0; s <= last; s++) row[s] = trn__expf(row[s] - mx);
            sum = trn__row_sum(row, last + 1);
            for (s = 0; s <= last; s++) row[s] /= sum;
            for (s = last + 1; s < T; s++) row[s] = 0.0f;
        }
        trn_sgemm(0, 0, T, hs, T, 1.0f, P, T, v, ld, 0.0f, out + (size_t)b * T * C + (size_t)h * hs, C);
    }
}

TRNDEF void trn_attention_backward(float *dqkv, float *scratch, const float *dout,
                                   const float *qkv, const float *att,
                                   int B, int T, int NH, int NKV, int hs, int causal) {
    int bg, ld = (NH + 2 * NKV) * hs, C = NH * hs, group = NH / NKV;
    float scale = 1.0f / sqrtf((float)hs);
    (void)causal; /* masked entries have P = 0, hence dS = 0: no special case */
    if (!dqkv) return;
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (bg = 0; bg < B * NKV; bg++) {
        int b = bg / NKV, g = bg % NKV, h, t, s;
        size_t x = (size_t)b * T * ld, koff = x + (size_t)(NH + g) * hs, voff = x + (size_t)(NH + NKV + g) * hs;
        const float *k = qkv + koff, *v = qkv + voff;
        float *dk = dqkv + koff, *dv = dqkv + voff;
        for (h = g * group; h < (g + 1) * group; h++) {
            const float *q = qkv + x + (size_t)h * hs;
            float *dq = dqkv + x + (size_t)h * hs;
            const float *dO = dout + (size_t)b * T * C + (size_t)h * hs;
            const float *P = att + ((size_t)b * NH + h) * T * T;
            float *dS = scratch + ((size_t)b * NH + h) * T * T;
            trn_sgemm(0, 1, T, T, hs, 1.0f, dO, C, v, ld, 0.0f, dS, T);  /* dP = dO V^T */
            trn_sgemm(1, 0, T, hs, T, 1.0f, P, T, dO, C, 1.0f, dv, ld);  /* dV += P^T dO */
            for (t = 0; t < T; t++) {
                const float *p = P + (size_t)t * T;
                float *d = dS + (size_t)t * T, dot = trn__row_dot(p, d, T);
                for (s = 0; s < T; s++) d[s] = p[s] * (d[s] - dot);
            }
            trn_sgemm(0, 0, T, hs, T, scale, dS, T, k, ld, 1.0f, dq, ld); /* dQ += dS K */
            trn_sgemm(1, 0, T, hs, T, scale, dS, T, q, ld, 1.0f, dk, ld); /* dK += dS^T Q */
        }
    }
}

/* --- fused attention (flash-style: Dao et al. 2022, "FlashAttention") ------
   The same function as the reference above, same qkv/out layout, without
   any (T,T) matrix. Queries are cut into blocks of BQ rows, keys into
   blocks of BK; a thread holds one (BQ,BK) tile of scores at a time.
   Forward, for each (b,h) and query block, key block j after key block j:
     S = Q K_j^T / sqrt(hs), then the "online softmax" (Milakov and
   Gimelshein 2018): each row keeps its running max m and its running sum
   l of e^(s - m). When block j raises the max to m', what was summed so
   far (l, and the output row O) is rescaled by e^(m - m'):
     m' = max(m, rowmax(S));  P = e^(S - m');
     l = l e^(m - m') + rowsum(P);  O = O e^(m - m') + P V_j
   At the end O /= l, and lse = m + log(l) (B,NH,T) is saved: with it
   backward rebuilds any probability exactly normalized, P = e^(S - lse).
   Backward, for each query block, D = rowsum(dO * O), which equals the
   reference's rowsum(dP * P) (sum_j P_ij dO_i.V_j = dO_i.O_i), then per
   key block:
     P = e^(S - lse);  dV_j += P^T dO;  dP = dO V_j^T;  dS = P * (dP - D);
     dQ += dS K_j / sqrt(hs);  dK_j += dS^T Q / sqrt(hs)
   Memory: out and lse instead of (B,NH,T,T) probabilities and a (B,NH,T,T)
   backward scratch; while it runs, a temporary K^T (and V^T) and a few
   tiles per thread. Work: with a causal mask the key blocks right of the
   diagonal are skipped, and inside the blocks on the diagonal the tiles
   past it (trn__fa_gemm_masked): at T = 128 the products do 1.13-1.15x
   the FLOPs of the exact causal triangle, where whole blocks did 1.61x;
   the tiles stay in cache where the reference streams (T,T) matrices
   through memory.
   The tile products. A GEMM packs its operands first (see >>matmul),
   which pays off when each packed float is used hundreds of times; here a
   tile of K is used BQ times and the packing would cost as much as the
   product. So every operand is laid out once so that the product can read
   it in place: K and V transposed once per head (K^T: (hs,T)), the rest
   as they are. trn__fa_gemm is then a register-blocked kernel that reads
   rows of B and broadcasts elements of A: with AVX-512, 6 rows x 64
   columns of C in 24 registers; with AVX2 + FMA, 6 x 16 in 12; with AArch64
   NEON, 6 x 16 in 24; with none of them it calls trn_sgemm.
   Threads: forward splits (b, h, query block); each task owns its rows of
   out and lse. Backward splits (b, kv head), as the reference does: every
   query block of every head in the group adds into each dK_j and dV_j.
   Sums run in a fixed order: the bits do not depend on the thread count. */
#define TRN__FA_BQ 96 /* query rows per block (a multiple of the 6-row tile) */
#define TRN__FA_BK 64 /* keys per block (one 64-column tile)               */

/* C (M,N) = alpha * A @ B + beta * C with beta 0 (C is not read) or 1;
   A[i][k] at A[i*sai + k*sak] (a row-major matrix or a transposed one),
   B row-major with row stride ldb, C with row stride ldc. */
#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif
#if defined(__AVX512F__)
#define TRN__FA_NR 64 /* the kernel's column tile */
static void trn__fa_gemm(int M, int N, int K, float alpha, const float *A, size_t sai, size_t sak,
                         const float *B, size_t ldb, float beta, float *C, size_t ldc) {
    int n0, i0, k, r, v;
    for (n0 = 0; n0 < N; n0 += 64) {
        __mmask16 mask[4];
        for (v = 0; v < 4; v++) { /* the columns n0+16v.. that exist */
            int rem = N - n0 - 16 * v;
            mask[v] = (__mmask16)(rem >= 16 ? 0xFFFF : rem > 0 ? (1u << rem) - 1 : 0);
        }
        for (i0 = 0; i0 < M; i0 += 6) {
            /* 24 named accumulators: with an array, GCC keeps them in memory */
            __m512 c00, c01, c02, c03, c10, c11, c12, c13, c20, c21, c22, c23;
            __m512 c30, c31, c32, c33, c40, c41, c42, c43, c50, c51, c52, c53, acc[6][4];
            const float *a0, *a1, *a2, *a3, *a4, *a5; /* rows past M repeat the last one; not stored */
            a0 = A + (size_t)TRN__MIN(i0 + 0, M - 1) * sai; a1 = A + (size_t)TRN__MIN(i0 + 1, M - 1) * sai;
            a2 = A + (size_t)TRN__MIN(i0 + 2, M - 1) * sai; a3 = A + (size_t)TRN__MIN(i0 + 3, M - 1) * sai;
            a4 = A + (size_t)TRN__MIN(i0 + 4, M - 1) * sai; a5 = A + (size_t)TRN__MIN(i0 + 5, M - 1) * sai;
            c00 = c01 = c02 = c03 = c10 = c11 = c12 = c13 = c20 = c21 = c22 = c23 = _mm512_setzero_ps();
            c30 = c31 = c32 = c33 = c40 = c41 = c42 = c43 = c50 = c51 = c52 = c53 = _mm512_setzero_ps();
            for (k = 0; k < K; k++) {
                const float *b = B + (size_t)k * ldb + n0;
                size_t ka = (size_t)k * sak;
                __m512 b0 = _mm512_maskz_loadu_ps(mask[0], b), b1 = _mm512_maskz_loadu_ps(mask[1], b + 16);
                __m512 b2 = _mm512_maskz_loadu_ps(mask[2], b + 32), b3 = _mm512_maskz_loadu_ps(mask[3], b + 48), x;
#define TRN__FA_ROW(r)                                                                            \
    x = _mm512_set1_ps(a##r[ka]);                                                                 \
    c##r##0 = _mm512_fmadd_ps(x, b0, c##r##0); c##r##1 = _mm512_fmadd_ps(x, b1, c##r##1);        \
    c##r##2 = _mm512_fmadd_ps(x, b2, c##r##2); c##r##3 = _mm512_fmadd_ps(x, b3, c##r##3);
                TRN__FA_ROW(0) TRN__FA_ROW(1) TRN__FA_ROW(2) TRN__FA_ROW(3) TRN__FA_ROW(4) TRN__FA_ROW(5)
#undef TRN__FA_ROW
            }
            acc[0][0] = c00; acc[0][1] = c01; acc[0][2] = c02; acc[0][3] = c03;
            acc[1][0] = c10; acc[1][1] = c11; acc[1][2] = c12; acc[1][3] = c13;
            acc[2][0] = c20; acc[2][1] = c21; acc[2][2] = c22; acc[2][3] = c23;
            acc[3][0] = c30; acc[3][1] = c31; acc[3][2] = c32; acc[3][3] = c33;
            acc[4][0] = c40; acc[4][1] = c41; acc[4][2] = c42; acc[4][3] = c43;
            acc[5][0] = c50; acc[5][1] = c51; acc[5][2] = c52; acc[5][3] = c53;
            for (r = 0; r < 6 && i0 + r < M; r++)
                for (v = 0; v < 4 && mask[v]; v++) {
                    float *c = C + (size_t)(i0 + r) * ldc + n0 + 16 * v;
                    __m512 y = _mm512_mul_ps(_mm512_set1_ps(alpha), acc[r][v]);
                    if (beta != 0.0f) y = _mm512_add_ps(y, _mm512_maskz_loadu_ps(mask[v], c));
                    _mm512_mask_storeu_ps(c, mask[v], y);
                }
        }
    }
}
#elif defined(__AVX2__) && defined(__FMA__)
/* AVX2 + FMA has 16 registers of 8 floats: the tile is 6 rows x 16 columns
   of C, 12 accumulators + 2 vectors of B + 1 broadcast = 15 registers. The
   last columns (N not a multiple of 16) load and store through a mask. */
#define TRN__FA_NR 16
/* One whole tile (6 rows, 16 columns), the common case. The 6 rows of A
   are reached from two pointers and the row stride (p, p + sai, p + 2 sai;
   q = p + 3 sai, ...), so the loop fits the 16 general registers: with six
   row pointers, a k counter and two strides, GCC kept the counter and a
   pointer on the stack and the tiles ran at 0.58 of the FMA peak (Zen 3). */
static void trn__fa_tile_6x16(int K, float alpha, const float *A, size_t sai, size_t sak, const float *B,
                              size_t ldb, float beta, float *C, size_t ldc) {
    const float *p = A, *q = A + 3 * sai, *b = B, *end = B + (size_t)K * ldb;
    __m256 c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51, y, al = _mm256_set1_ps(alpha);
    c00 = c01 = c10 = c11 = c20 = c21 = c30 = c31 = c40 = c41 = c50 = c51 = _mm256_setzero_ps();
    for (; b != end; b += ldb, p += sak, q += sak) {
        __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8), x;
#define TRN__FA_ROW(r, ptr)                                                                       \
    x = _mm256_broadcast_ss(ptr);                                                                 \
    c##r##0 = _mm256_fmadd_ps(x, b0, c##r##0); c##r##1 = _mm256_fmadd_ps(x, b1, c##r##1);
        TRN__FA_ROW(0, p) TRN__FA_ROW(1, p + sai) TRN__FA_ROW(2, p + 2 * sai)
        TRN__FA_ROW(3, q) TRN__FA_ROW(4, q + sai) TRN__FA_ROW(5, q + 2 * sai)
#undef TRN__FA_ROW
    }
#define TRN__FA_PUT(r, v)                                                                         \
    y = _mm256_mul_ps(al, c##r##v);                                                               \
    if (beta != 0.0f) y = _mm256_add_ps(y, _mm256_loadu_ps(C + r * ldc + 8 * v));                \
    _mm256_storeu_ps(C + r * ldc + 8 * v, y);
    TRN__FA_PUT(0, 0) TRN__FA_PUT(0, 1) TRN__FA_PUT(1, 0) TRN__FA_PUT(1, 1) TRN__FA_PUT(2, 0) TRN__FA_PUT(2, 1)
    TRN__FA_PUT(3, 0) TRN__FA_PUT(3, 1) TRN__FA_PUT(4, 0) TRN__FA_PUT(4, 1) TRN__FA_PUT(5, 0) TRN__FA_PUT(5, 1)
#undef TRN__FA_PUT
}
static void trn__fa_gemm(int M, int N, int K, float alpha, const float *A, size_t sai, size_t sak,
                         const float *B, size_t ldb, float beta, float *C, size_t ldc) {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    int n0, i0, k, r, v;
    for (n0 = 0; n0 < N; n0 += 16) {
        __m256i mask[2]; /* lane l of vector v: column n0+8v+l exists */
        int full = N - n0 >= 16;
        mask[0] = _mm256_cmpgt_epi32(_mm256_set1_epi32(N - n0), lane);
        mask[1] = _mm256_cmpgt_epi32(_mm256_set1_epi32(N - n0 - 8), lane);
        for (i0 = 0; i0 < M; i0 += 6) {
            if (full && i0 + 6 <= M) {
                trn__fa_tile_6x16(K, alpha, A + (size_t)i0 * sai, sai, sak, B + n0, ldb, beta,
                                  C + (size_t)i0 * ldc + n0, ldc);
                continue;
            }
            __m256 c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51, acc[6][2];
            const float *a0, *a1, *a2, *a3, *a4, *a5; /* rows past M repeat the last one; not stored */
            a0 = A + (size_t)TRN__MIN(i0 + 0, M - 1) * sai; a1 = A + (size_t)TRN__MIN(i0 + 1, M - 1) * sai;
            a2 = A + (size_t)TRN__MIN(i0 + 2, M - 1) * sai; a3 = A + (size_t)TRN__MIN(i0 + 3, M - 1) * sai;
            a4 = A + (size_t)TRN__MIN(i0 + 4, M - 1) * sai; a5 = A + (size_t)TRN__MIN(i0 + 5, M - 1) * sai;
            c00 = c01 = c10 = c11 = c20 = c21 = c30 = c31 = c40 = c41 = c50 = c51 = _mm256_setzero_ps();
#define TRN__FA_ROW(r)                                                                            \
    x = _mm256_broadcast_ss(a##r + ka);                                                           \
    c##r##0 = _mm256_fmadd_ps(x, b0, c##r##0); c##r##1 = _mm256_fmadd_ps(x, b1, c##r##1);
#define TRN__FA_STEP(LOAD0, LOAD1)                                                                \
    for (k = 0; k < K; k++) {                                                                     \
        const float *b = B + (size_t)k * ldb + n0;                                                \
        size_t ka = (size_t)k * sak;                                                              \
        __m256 b0 = LOAD0, b1 = LOAD1, x;                                                         \
        TRN__FA_ROW(0) TRN__FA_ROW(1) TRN__FA_ROW(2) TRN__FA_ROW(3) TRN__FA_ROW(4) TRN__FA_ROW(5) \
    }
            if (full) { /* the common case: plain loads, no mask in the loop */
                TRN__FA_STEP(_mm256_loadu_ps(b), _mm256_loadu_ps(b + 8))
            } else {
                TRN__FA_STEP(_mm256_maskload_ps(b, mask[0]), _mm256_maskload_ps(b + 8, mask[1]))
            }
#undef TRN__FA_STEP
#undef TRN__FA_ROW
            acc[0][0] = c00; acc[0][1] = c01; acc[1][0] = c10; acc[1][1] = c11;
            acc[2][0] = c20; acc[2][1] = c21; acc[3][0] = c30; acc[3][1] = c31;
            acc[4][0] = c40; acc[4][1] = c41; acc[5][0] = c50; acc[5][1] = c51;
            /* the edge tiles; the masked store is slow on AMD Zen
               (microcoded): plain loads and stores where 16 columns exist */
            for (r = 0; r < 6 && i0 + r < M; r++)
                for (v = 0; v < 2 && N - n0 - 8 * v > 0; v++) {
                    float *c = C + (size_t)(i0 + r) * ldc + n0 + 8 * v;
                    __m256 y = _mm256_mul_ps(_mm256_set1_ps(alpha), acc[r][v]);
                    if (full) {
                        if (beta != 0.0f) y = _mm256_add_ps(y, _mm256_loadu_ps(c));
                        _mm256_storeu_ps(c, y);
                    } else {
                        if (beta != 0.0f) y = _mm256_add_ps(y, _mm256_maskload_ps(c, mask[v]));
                        _mm256_maskstore_ps(c, mask[v], y);
                    }
                }
        }
    }
}
#elif defined(__ARM_NEON) && defined(__aarch64__)
/* AArch64 NEON has 32 registers of 4 floats: the tile is 6 rows x 16
   columns, 24 accumulators + 4 vectors of B + 1 for A = 29 registers. NEON
   loads have no mask: a last tile narrower than 16 columns (N not a
   multiple of 16) runs the plain loop below, in the same k order. */
#include <arm_neon.h>
#define TRN__FA_NR 16
static void trn__fa_gemm(int M, int N, int K, float alpha, const float *A, size_t sai, size_t sak,
                         const float *B, size_t ldb, float beta, float *C, size_t ldc) {
    int n0, i0, k, r, v, j;
    for (n0 = 0; n0 < N; n0 += 16) {
        if (N - n0 < 16) { /* the narrow last tile */
            for (r = 0; r < M; r++)
                for (j = n0; j < N; j++) {
                    float s = 0.0f, *c = C + (size_t)r * ldc + j;
                    for (k = 0; k < K; k++) s += A[(size_t)r * sai + (size_t)k * sak] * B[(size_t)k * ldb + j];
                    *c = beta != 0.0f ? alpha * s + *c : alpha * s;
                }
            break;
        }
        for (i0 = 0; i0 < M; i0 += 6) {
            float32x4_t c00, c01, c02, c03, c10, c11, c12, c13, c20, c21, c22, c23;
            float32x4_t c30, c31, c32, c33, c40, c41, c42, c43, c50, c51, c52, c53, acc[6][4];
            const float *a0, *a1, *a2, *a3, *a4, *a5; /* rows past M repeat the last one; not stored */
            a0 = A + (size_t)TRN__MIN(i0 + 0, M - 1) * sai; a1 = A + (size_t)TRN__MIN(i0 + 1, M - 1) * sai;
            a2 = A + (size_t)TRN__MIN(i0 + 2, M - 1) * sai; a3 = A + (size_t)TRN__MIN(i0 + 3, M - 1) * sai;
            a4 = A + (size_t)TRN__MIN(i0 + 4, M - 1) * sai; a5 = A + (size_t)TRN__MIN(i0 + 5, M - 1) * sai;
            c00 = c01 = c02 = c03 = c10 = c11 = c12 = c13 = c20 = c21 = c22 = c23 = vdupq_n_f32(0.0f);
            c30 = c31 = c32 = c33 = c40 = c41 = c42 = c43 = c50 = c51 = c52 = c53 = vdupq_n_f32(0.0f);
            for (k = 0; k < K; k++) {
                const float *b = B + (size_t)k * ldb + n0;
                size_t ka = (size_t)k * sak;
                float32x4_t b0 = vld1q_f32(b), b1 = vld1q_f32(b + 4), b2 = vld1q_f32(b + 8), b3 = vld1q_f32(b + 12);
                float x;
#define TRN__FA_ROW(r)                                                                            \
    x = a##r[ka];                                                                                 \
    c##r##0 = vfmaq_n_f32(c##r##0, b0, x); c##r##1 = vfmaq_n_f32(c##r##1, b1, x);                 \
    c##r##2 = vfmaq_n_f32(c##r##2, b2, x); c##r##3 = vfmaq_n_f32(c##r##3, b3, x);
                TRN__FA_ROW(0) TRN__FA_ROW(1) TRN__FA_ROW(2) TRN__FA_ROW(3) TRN__FA_ROW(4) TRN__FA_ROW(5)
#undef TRN__FA_ROW
            }
            acc[0][0] = c00; acc[0][1] = c01; acc[0][2] = c02; acc[0][3] = c03;
            acc[1][0] = c10; acc[1][1] = c11; acc[1][2] = c12; acc[1][3] = c13;
            acc[2][0] = c20; acc[2][1] = c21; acc[2][2] = c22; acc[2][3] = c23;
            acc[3][0] = c30; acc[3][1] = c31; acc[3][2] = c32; acc[3][3] = c33;
            acc[4][0] = c40; acc[4][1] = c41; acc[4][2] = c42; acc[4][3] = c43;
            acc[5][0] = c50; acc[5][1] = c51; acc[5][2] = c52; acc[5][3] = c53;
            for (r = 0; r < 6 && i0 + r < M; r++)
                for (v = 0; v < 4; v++) {
                    float *c = C + (size_t)(i0 + r) * ldc + n0 + 4 * v;
                    float32x4_t y = vmulq_n_f32(acc[r][v], alpha);
                    if (beta != 0.0f) y = vaddq_f32(y, vld1q_f32(c));
                    vst1q_f32(c, y);
                }
        }
    }
}
#else
/* the plain version: trn_sgemm with the strides as leading dimensions */
#define TRN__FA_NR 8 /* see trn__fa_pad8 */
static void trn__fa_gemm(int M, int N, int K, float alpha, const float *A, size_t sai, size_t sak,
                         const float *B, size_t ldb, float beta, float *C, size_t ldc) {
    int ta = sak != 1; /* A^T stored row-major: A[i][k] = At[k*sak + i] */
    trn_sgemm(ta, 0, M, N, K, alpha, A, (int)(ta ? sak : sai), B, (int)ldb, beta, C, (int)ldc);
}
#endif

/* The causal mask in the tile products. In a tile that straddles the
   diagonal, query i sees key j only where j <= i; the masked probabilities
   are 0, so terms and outputs past the diagonal are zeros (or unused) and
   need not be computed. With rows of A cut into panels of 6 (the kernel's
   row tile), each panel skips what no row of it needs. With lim = i0 - j0
   (query block start - key block start), query row r sees key column c
   when c <= r + lim:
     TRN__FA_COLS    rows = queries, columns = keys (S = Q K^T, dP = dO V^T):
                     a panel computes columns < last row + lim + 1 (rounded
                     up to whole column tiles); the others are never read.
     TRN__FA_KHEAD   rows = queries, k = keys (P V, dS K): terms k > r + lim
                     are products with a zero probability: the panel's sum
                     stops after its last row's last visible key.
     TRN__FA_KTAIL   rows = keys, k = queries (P^T dO, dS^T Q): terms with
                     k + lim < r are zero: the panel's sum starts at its
                     first row's first query that sees it.
   Dropping a zero term leaves every sum's bits as they were (x + 0 = x; a
   leading 0 + 0 is 0 either way): same results, about 2/3 of the work of
   a 128-token causal step. TRN__FA_ALL: every term counts (no mask). */
enum { TRN__FA_ALL, TRN__FA_COLS, TRN__FA_KHEAD, TRN__FA_KTAIL };
static void trn__fa_gemm_masked(int kind, int lim, int M, int N, int K, float alpha, const float *A, size_t sai,
                                size_t sak, const float *B, size_t ldb, float beta, float *C, size_t ldc) {
    int r0;
    if (kind == TRN__FA_ALL) {
        trn__fa_gemm(M, N, K, alpha, A, sai, sak, B, ldb, beta, C, ldc);
        return;
    }
    for (r0 = 0; r0 < M; r0 += 6) {
        int mr = TRN__MIN(6, M - r0), last = r0 + mr - 1, n = N, k0 = 0, k1 = K;
        if (kind == TRN__FA_COLS) n = TRN__MIN(N, (last + lim + TRN__FA_NR) / TRN__FA_NR * TRN__FA_NR);
        if (kind == TRN__FA_KHEAD) k1 = TRN__MIN(K, last + lim + 1);
        if (kind == TRN__FA_KTAIL) k0 = TRN__MAX(0, r0 - lim);
        if (n <= 0) continue;
        if (k1 <= k0) { /* no term left: C = beta C, which is C (beta 1) or 0 */
            int r, j;
            if (beta == 0.0f)
                for (r = r0; r <= last; r++)
                    for (j = 0; j < n; j++) C[(size_t)r * ldc + j] = 0.0f;
            continue;
        }
        trn__fa_gemm(mr, n, k1 - k0, alpha, A + (size_t)r0 * sai + (size_t)k0 * sak, sai, sak,
                     B + (size_t)k0 * ldb, ldb, beta, C + (size_t)r0 * ldc, ldc);
    }
}

/* how many keys of the block j0..j0+nk-1 query position i sees */
static int trn__fa_visible(int causal, int i, int j0, int nk) {
    int n = causal ? i - j0 + 1 : nk;
    return n < 0 ? 0 : n > nk ? nk : n;
}

/* The loops over a row of a score tile run to n rounded up to 8 (at most
   nk), with a select that keeps columns n.. at 0: the compiler's vector
   loop then has no scalar tail, which, a row of the diagonal tile being
   1 to 64 long, took half the time of the exps (AVX2, T = 128). Those
   columns are computed (TRN__FA_COLS computes whole groups of 8 or more),
   their values are dropped. */
static int trn__fa_pad8(int n, int nk) {
    int e = (n + 7) / 8 * 8;
    return e < nk ? e : nk;
}

/* xt (hs,T), row stride ldt = the (T,hs) rows of one head of qkv (row
   stride ld), transposed. ldt is T rounded up to 16, plus 16: rows 4 KiB
   apart (T = 1024) would all fall into the same few sets of the L1 cache. */
static size_t trn__fa_ldt(int T) { return ((size_t)T + 15) / 16 * 16 + 16; }
static void trn__fa_transpose(float *xt, const float *x, size_t ld, int T, int hs) {
    size_t ldt = trn__fa_ldt(T);
    int t0 = 0, t, d;
#if defined(__AVX2__)
    /* 8 x 8 blocks in registers: 8 row loads, 24 shuffles, 8 row stores,
       where the plain loop below makes 64 single loads and stores (it was
       a tenth of the attention's time at T = 128, hs = 48). Pairs of rows
       are interleaved (unpack), then pairs of pairs (shuffle), then the
       128-bit halves swapped (permute): row d of the block is column d. */
    int d0 = hs / 8 * 8;
    for (t0 = 0; t0 + 8 <= T; t0 += 8)
        for (d = 0; d < d0; d += 8) {
            const float *s = x + (size_t)t0 * ld + d;
            float *o = xt + (size_t)d * ldt + t0;
            __m256 r0 = _mm256_loadu_ps(s), r1 = _mm256_loadu_ps(s + ld), r2 = _mm256_loadu_ps(s + 2 * ld);
            __m256 r3 = _mm256_loadu_ps(s + 3 * ld), r4 = _mm256_loadu_ps(s + 4 * ld), r5 = _mm256_loadu_ps(s + 5 * ld);
            __m256 r6 = _mm256_loadu_ps(s + 6 * ld), r7 = _mm256_loadu_ps(s + 7 * ld);
            __m256 u0 = _mm256_unpacklo_ps(r0, r1), u1 = _mm256_unpackhi_ps(r0, r1); /* t0 t1 interleaved */
            __m256 u2 = _mm256_unpacklo_ps(r2, r3), u3 = _mm256_unpackhi_ps(r2, r3);
            __m256 u4 = _mm256_unpacklo_ps(r4, r5), u5 = _mm256_unpackhi_ps(r4, r5);
            __m256 u6 = _mm256_unpacklo_ps(r6, r7), u7 = _mm256_unpackhi_ps(r6, r7);
            __m256 v0 = _mm256_shuffle_ps(u0, u2, 0x44), v1 = _mm256_shuffle_ps(u0, u2, 0xEE); /* 4 rows' column */
            __m256 v2 = _mm256_shuffle_ps(u1, u3, 0x44), v3 = _mm256_shuffle_ps(u1, u3, 0xEE);
            __m256 v4 = _mm256_shuffle_ps(u4, u6, 0x44), v5 = _mm256_shuffle_ps(u4, u6, 0xEE);
            __m256 v6 = _mm256_shuffle_ps(u5, u7, 0x44), v7 = _mm256_shuffle_ps(u5, u7, 0xEE);
            _mm256_storeu_ps(o + 0 * ldt, _mm256_permute2f128_ps(v0, v4, 0x20));
            _mm256_storeu_ps(o + 1 * ldt, _mm256_permute2f128_ps(v1, v5, 0x20));
            _mm256_storeu_ps(o + 2 * ldt, _mm256_permute2f128_ps(v2, v6, 0x20));
            _mm256_storeu_ps(o + 3 * ldt, _mm256_permute2f128_ps(v3, v7, 0x20));
            _mm256_storeu_ps(o + 4 * ldt, _mm256_permute2f128_ps(v0, v4, 0x31));
            _mm256_storeu_ps(o + 5 * ldt, _mm256_permute2f128_ps(v1, v5, 0x31));
            _mm256_storeu_ps(o + 6 * ldt, _mm256_permute2f128_ps(v2, v6, 0x31));
            _mm256_storeu_ps(o + 7 * ldt, _mm256_permute2f128_ps(v3, v7, 0x31));
        }
    /* what is left: the columns d0.. of those rows, then the last T % 8 rows */
    for (t = 0; t < t0; t++)
        for (d = d0; d < hs; d++) xt[(size_t)d * ldt + t] = x[(size_t)t * ld + d];
#endif
    for (; t0 < T; t0 += 16) /* 16 rows at a time: whole lines of xt */
        for (d = 0; d < hs; d++)
            for (t = t0; t < TRN__MIN(t0 + 16, T); t++) xt[(size_t)d * ldt + t] = x[(size_t)t * ld + d];
}

/* One workspace for both passes (they never run at once), kept and only
   grown, like matmul's packing buffers: after the first step no attention
   call allocates, so the ledger stays still (TEMP). */
static float *trn__fa_ws;
static size_t trn__fa_ws_floats;
static float *trn__fa_alloc(size_t floats) {
    float *p;
    if (floats <= trn__fa_ws_floats) return trn__fa_ws;
    p = (float *)trn_alloc(floats * sizeof(float), TRN_KIND_TEMP);
    if (!p) trn_fatal("flash attention: cannot allocate %zu bytes of workspace: %s", floats * sizeof(float),
                      trn_error_reason());
    trn_free(trn__fa_ws);
    trn__fa_ws = p;
    trn__fa_ws_floats = floats;
    return p;
}

TRNDEF void trn_flash_attention_forward(float *out, float *lse, const float *qkv,
                                        int B, int T, int NH, int NKV, int hs, int causal) {
    int ld = (NH + 2 * NKV) * hs, C = NH * hs, group = NH / NKV, bg;
    int nqb = (T + TRN__FA_BQ - 1) / TRN__FA_BQ;
    long task, ntask = (long)B * NH * nqb;
    float scale = 1.0f / sqrtf((float)hs);
    int cols = causal ? TRN__FA_COLS : TRN__FA_ALL, khead = causal ? TRN__FA_KHEAD : TRN__FA_ALL;
    size_t tile = TRN__FA_BQ * TRN__FA_BK, ldt = trn__fa_ldt(T), kt_floats = (size_t)B * NKV * hs * ldt;
    float *kt, *work;
    if ((size_t)B * T == 0) return;
    kt = trn__fa_alloc(kt_floats + (size_t)trn_get_threads() * tile); /* K^T per (b, kv head), tiles */
    work = kt + kt_floats;
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (bg = 0; bg < B * NKV; bg++)
        trn__fa_transpose(kt + (size_t)bg * hs * ldt, qkv + (size_t)(bg / NKV) * T * ld + (size_t)(NH + bg % NKV) * hs,
                          (size_t)ld, T, hs);
#ifdef _OPENMP
#pragma omp parallel for schedule(dynamic, 1)
#endif
    for (task = 0; task < ntask; task++) {
        float m[TRN__FA_BQ], l[TRN__FA_BQ], mnew[TRN__FA_BQ], corr[TRN__FA_BQ];
#ifdef _OPENMP
        float *S = work + (size_t)omp_get_thread_num() * tile;
#else
        float *S = work;
#endif
        /* last query blocks first: with a mask they are the longest */
        int qb = nqb - 1 - (int)(task % nqb), bh = (int)(task / nqb);
        int b = bh / NH, h = bh % NH, g = h / group;
        int i0 = qb * TRN__FA_BQ, nq = TRN__MIN(TRN__FA_BQ, T - i0);
        int kend = causal ? i0 + nq : T, j0, r, c;
        const float *x = qkv + (size_t)b * T * ld;
        const float *q = x + (size_t)i0 * ld + (size_t)h * hs, *v = x + (size_t)(NH + NKV + g) * hs;
        const float *k_t = kt + ((size_t)b * NKV + g) * hs * ldt;
        float *o = out + ((size_t)b * T + i0) * C + (size_t)h * hs;
        for (r = 0; r < nq; r++) {
            m[r] = -INFINITY;
            l[r] = 0.0f;
            memset(o + (size_t)r * C, 0, sizeof(float) * (size_t)hs);
        }
        for (j0 = 0; j0 < kend; j0 += TRN__FA_BK) {
            int nk = TRN__MIN(TRN__FA_BK, kend - j0);
            trn__fa_gemm_masked(cols, i0 - j0, nq, nk, hs, scale, q, (size_t)ld, 1, k_t + j0, ldt, 0.0f, S, TRN__FA_BK);
            /* the new maxima, then their corrections e^(m - m') for all
               rows in one loop (vectorized, where one exp per row was a
               scalar chain per row), then the rows' exps and sums */
            for (r = 0; r < nq; r++) {
                int n = trn__fa_visible(causal, i0 + r, j0, nk);
                float mx = n > 0 ? trn__row_max(S + r * TRN__FA_BK, n) : -INFINITY;
                mnew[r] = mx < m[r] ? m[r] : mx; /* every row sees key 0: finite after the first block */
            }
            for (r = 0; r < nq; r++) corr[r] = trn__expf(m[r] - mnew[r]); /* e^-inf = 0 on the first block */
            for (r = 0; r < nq; r++) {
                float *s = S + r * TRN__FA_BK, *orow = o + (size_t)r * C, mx = mnew[r];
                int n = trn__fa_visible(causal, i0 + r, j0, nk), ne = trn__fa_pad8(n, nk);
                for (c = 0; c < ne; c++) { /* whole vectors: no scalar tail */
                    float e = trn__expf(s[c] - mx);
                    s[c] = c < n ? e : 0.0f;
                }
                for (; c < nk; c++) s[c] = 0.0f;
                l[r] = l[r] * corr[r] + trn__row_sum(s, n);
                m[r] = mx;
                if (corr[r] != 1.0f)
                    for (c = 0; c < hs; c++) orow[c] *= corr[r];
            }
            trn__fa_gemm_masked(khead, i0 - j0, nq, hs, nk, 1.0f, S, TRN__FA_BK, 1, v + (size_t)j0 * ld, (size_t)ld, 1.0f,
                                o, (size_t)C);
        }
        for (r = 0; r < nq; r++) {
            float inv = 1.0f / l[r], *orow = o + (size_t)r * C;
            for (c = 0; c < hs; c++) orow[c] *= inv;
            lse[(size_t)bh * T + i0 + r] = m[r] + logf(l[r]);
        }
    }
}

TRNDEF void trn_flash_attention_backward(float *dqkv, const float *dout, const float *qkv,
                                         const float *out, const float *lse,
                                         int B, int T, int NH, int NKV, int hs, int causal) {
    int bg, ld = (NH + 2 * NKV) * hs, C = NH * hs, group = NH / NKV;
    int nqb = (T + TRN__FA_BQ - 1) / TRN__FA_BQ;
    float scale = 1.0f / sqrtf((float)hs);
    int cols = causal ? TRN__FA_COLS : TRN__FA_ALL, khead = causal ? TRN__FA_KHEAD : TRN__FA_ALL;
    int ktail = causal ? TRN__FA_KTAIL : TRN__FA_ALL;
    /* per thread: K^T and V^T of its kv head, the tiles P and dS */
    size_t tile = TRN__FA_BQ * TRN__FA_BK, ldt = trn__fa_ldt(T), per = 2 * (size_t)hs * ldt + 2 * tile;
    float *work;
    if (!dqkv || (size_t)B * T == 0) return;
    work = trn__fa_alloc((size_t)trn_get_threads() * per);
#ifdef _OPENMP
#pragma omp parallel for schedule(dynamic, 1)
#endif
    for (bg = 0; bg < B * NKV; bg++) {
        float D[TRN__FA_BQ];
#ifdef _OPENMP
        float *k_t = work + (size_t)omp_get_thread_num() * per;
#else
        float *k_t = work;
#endif
        float *v_t = k_t + (size_t)hs * ldt, *P = v_t + (size_t)hs * ldt, *dS = P + tile;
        int b = bg / NKV, g = bg % NKV, h, qb;
        size_t x = (size_t)b * T * ld, koff = x + (size_t)(NH + g) * hs, voff = x + (size_t)(NH + NKV + g) * hs;
        const float *k = qkv + koff;
        float *dk = dqkv + koff, *dv = dqkv + voff;
        trn__fa_transpose(k_t, k, (size_t)ld, T, hs);
        trn__fa_transpose(v_t, qkv + voff, (size_t)ld, T, hs);
        for (h = g * group; h < (g + 1) * group; h++)
            for (qb = 0; qb < nqb; qb++) {
                int i0 = qb * TRN__FA_BQ, nq = TRN__MIN(TRN__FA_BQ, T - i0);
                int kend = causal ? i0 + nq : T, j0, r, c;
                size_t qoff = x + (size_t)i0 * ld + (size_t)h * hs;
                size_t ooff = ((size_t)b * T + i0) * C + (size_t)h * hs;
                const float *q = qkv + qoff, *o = out + ooff, *dO = dout + ooff;
                const float *L = lse + ((size_t)b * NH + h) * T + i0;
                float *dq = dqkv + qoff;
                for (r = 0; r < nq; r++) D[r] = trn__row_dot(dO + (size_t)r * C, o + (size_t)r * C, hs);
                for (j0 = 0; j0 < kend; j0 += TRN__FA_BK) {
                    int nk = TRN__MIN(TRN__FA_BK, kend - j0);
                    /* P = e^(Q K_j^T / sqrt(hs) - lse), masked */
                    trn__fa_gemm_masked(cols, i0 - j0, nq, nk, hs, scale, q, (size_t)ld, 1, k_t + j0, ldt, 0.0f, P,
                                        TRN__FA_BK);
                    for (r = 0; r < nq; r++) {
                        float *p = P + r * TRN__FA_BK;
                        int n = trn__fa_visible(causal, i0 + r, j0, nk), ne = trn__fa_pad8(n, nk);
                        for (c = 0; c < ne; c++) {
                            float e = trn__expf(p[c] - L[r]);
                            p[c] = c < n ? e : 0.0f;
                        }
                        for (; c < nk; c++) p[c] = 0.0f;
                    }
                    /* dV_j += P^T dO */
                    trn__fa_gemm_masked(ktail, i0 - j0, nk, hs, nq, 1.0f, P, 1, TRN__FA_BK, dO, (size_t)C, 1.0f,
                                        dv + (size_t)j0 * ld, (size_t)ld);
                    /* dS = P * (dO V_j^T - D) */
                    trn__fa_gemm_masked(cols, i0 - j0, nq, nk, hs, 1.0f, dO, (size_t)C, 1, v_t + j0, ldt, 0.0f, dS,
                                        TRN__FA_BK);
                    for (r = 0; r < nq; r++) {
                        const float *p = P + r * TRN__FA_BK;
                        float *d = dS + r * TRN__FA_BK;
                        int n = trn__fa_visible(causal, i0 + r, j0, nk), ne = trn__fa_pad8(n, nk);
                        for (c = 0; c < ne; c++) {
                            float e = p[c] * (d[c] - D[r]);
                            d[c] = c < n ? e : 0.0f;
                        }
                        for (; c < nk; c++) d[c] = 0.0f; /* past ne: not computed */
                    }
                    /* dQ += dS K_j / sqrt(hs);  dK_j += dS^T Q / sqrt(hs) */
                    trn__fa_gemm_masked(khead, i0 - j0, nq, hs, nk, scale, dS, TRN__FA_BK, 1, k + (size_t)j0 * ld,
                                        (size_t)ld, 1.0f, dq, (size_t)ld);
                    trn__fa_gemm_masked(ktail, i0 - j0, nk, hs, nq, scale, dS, 1, TRN__FA_BK, q, (size_t)ld, 1.0f,
                                        dk + (size_t)j0 * ld, (size_t)ld);
                }
            }
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
TRNDEF void trn_cross_entropy_forward(float *losses, float *lse, const float *logits,
                                     const int *targets, int N, int V, int Vp) {
    int n;
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (n = 0; n < N; n++) {
        const float *l = logits + (size_t)n * Vp;
        float mx = trn__row_max(l, V);
        lse[n] = mx + (float)log(trn__row_sum_exp(l, V, mx));
        losses[n] = lse[n] - l[targets[n]];
    }
}

TRNDEF void trn_cross_entropy_backward(float *dlogits, const float *logits, const float *lse,
                                      const int *targets, float dloss, int N, int V, int Vp) {
    int n;
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (n = 0; n < N; n++) {
        const float *l = logits + (size_t)n * Vp;
        float *d = dlogits + (size_t)n * Vp, m = lse[n];
        int v;
        for (v = 0; v < V; v++) d[v] += dloss * trn__expf(l[v] - m);
        d[targets[n]] -= dloss;
    }
}

/* Both at once, the classifier's way: one row at a time, the loss, then the
   row's logits overwritten by their gradient (WRITTEN, not accumulated: the
   logits die here, their gradient takes their place). The plain reference
   of train_cuda.h's fused kernel (>>classifier there). */
TRNDEF void trn_crossentropy_fused(float *losses, float *logits, const int *targets, float dloss, int N, int V,
                                   int Vp) {
    int n;
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (n = 0; n < N; n++) {
        float *l = logits + (size_t)n * Vp, mx = trn__row_max(l, V), z;
        int v, t = targets[n];
        z = mx + (float)log(trn__row_sum_exp(l, V, mx));
        losses[n] = z - l[t];
        for (v = 0; v < V; v++) l[v] = dloss * trn__expf(l[v] - z);
        for (; v < Vp; v++) l[v] = 0.0f;
        l[t] -= dloss;
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
TRNDEF void trn_mean_pool_forward(float *out, const float *inp, int B, int T, int C) {
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

TRNDEF void trn_mean_pool_backward(float *dinp, const float *dout, int B, int T, int C) {
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
        double s = 0.0, acc[8] = {0, 0, 0, 0, 0, 0, 0, 0}; /* 8 lanes: vectorizes */
        int j;
        for (i = lo; i + 8 <= hi; i += 8)
            for (j = 0; j < 8; j++) acc[j] += (double)x[i + j] * x[i + j];
        for (j = 0; j < 8; j++) s += acc[j];
        for (; i < hi; i++) s += (double)x[i] * x[i];
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
   >>ops2: the ops of modern decoders (Llama and friends)
   ======================================================================== */

/* --- elementwise product, same shape or one row broadcast over rows ------
   out[n,c] = a[n,c] * b[c'] with c' = n*C+c (same shape: N = 1, C = size)
   or c' = c (b is one row of C). a (N,C); b (C) or (N*C as N=1).
   Saved: both inputs (each one's gradient needs the other).
   Backward: da = dout * b;  db = dout * a, summed over the rows b was
   broadcast over. */
TRNDEF void trn_mul_forward(float *out, const float *a, const float *b, size_t N, size_t C) {
    long long n;
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (n = 0; n < (long long)N; n++) {
        const float *x = a + (size_t)n * C;
        float *y = out + (size_t)n * C;
        size_t c;
        for (c = 0; c < C; c++) y[c] = x[c] * b[c];
    }
}

TRNDEF void trn_mul_backward(float *da, float *db, const float *dout, const float *a, const float *b,
                             size_t N, size_t C) {
    long long n, blk, nblk = (long long)((C + 63) / 64);
    if (da) {
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
        for (n = 0; n < (long long)N; n++) {
            const float *g = dout + (size_t)n * C;
            float *d = da + (size_t)n * C;
            size_t c;
            for (c = 0; c < C; c++) d[c] += g[c] * b[c];
        }
    }
    if (!db) return;
    /* a sum over rows: split the channels over threads, rows in order */
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (blk = 0; blk < nblk; blk++) {
        size_t c0 = (size_t)blk * 64, c1 = TRN__MIN(C, c0 + 64), r, c;
        float acc[64];
        for (c = 0; c < 64; c++) acc[c] = 0.0f;
        for (r = 0; r < N; r++)
            for (c = c0; c < c1; c++) acc[c - c0] += dout[r * C + c] * a[r * C + c];
        for (c = c0; c < c1; c++) db[c] += acc[c - c0];
    }
}

/* --- sigmoid, SiLU, tanh ---------------------------------------------------
   sigmoid(x) = 1 / (1 + e^-x); its derivative is s (1 - s), so backward
   reads the saved output. SiLU (Swish-1, Elfwing et al. 2017; Llama's
   MLP gate) y = x s(x): dy/dx = s + x s (1 - s); backward recomputes s
   from the saved input. tanh: dy/dx = 1 - y^2, from the output. */
static inline float trn__sigmoidf(float x) { return 1.0f / (1.0f + trn__expf(-x)); }

TRNDEF void trn_sigmoid_forward(float *out, const float *inp, size_t n) {
    long long i;
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (i = 0; i < (long long)n; i++) out[i] = trn__sigmoidf(inp[i]);
}
TRNDEF void trn_sigmoid_backward(float *dinp, const float *out, const float *dout, size_t n) {
    long long i;
    if (!dinp) return;
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (i = 0; i < (long long)n; i++) dinp[i] += dout[i] * out[i] * (1.0f - out[i]);
}

TRNDEF void trn_silu_forward(float *out, const float *inp, size_t n) {
    long long i;
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (i = 0; i < (long long)n; i++) out[i] = inp[i] * trn__sigmoidf(inp[i]);
}
TRNDEF void trn_silu_backward(float *dinp, const float *inp, const float *dout, size_t n) {
    long long i;
    if (!dinp) return;
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (i = 0; i < (long long)n; i++) {
        float x = inp[i], s = trn__sigmoidf(x);
        dinp[i] += dout[i] * (s + x * s * (1.0f - s));
    }
}

TRNDEF void trn_tanh_forward(float *out, const float *inp, size_t n) {
    long long i;
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (i = 0; i < (long long)n; i++) out[i] = tanhf(inp[i]);
}
TRNDEF void trn_tanh_backward(float *dinp, const float *out, const float *dout, size_t n) {
    long long i;
    if (!dinp) return;
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (i = 0; i < (long long)n; i++) dinp[i] += dout[i] * (1.0f - out[i] * out[i]);
}

/* --- softmax over the last dim ---------------------------------------------
   y = e^(x - max) / sum e^(x - max) per row of C (the max keeps e^ finite).
   Saved: the output y. Backward: dx = y * (dy - sum_j dy_j y_j). */
TRNDEF void trn_softmax_forward(float *out, const float *inp, int N, int C) {
    int n;
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        float *y = out + (size_t)n * C;
        float mx = trn__row_max(x, C), inv;
        double sum = 0.0;
        int i;
        for (i = 0; i < C; i++) y[i] = trn__expf(x[i] - mx);
        for (i = 0; i < C; i++) sum += y[i];
        inv = (float)(1.0 / sum);
        for (i = 0; i < C; i++) y[i] *= inv;
    }
}
TRNDEF void trn_softmax_backward(float *dinp, const float *out, const float *dout, int N, int C) {
    int n;
    if (!dinp) return;
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (n = 0; n < N; n++) {
        const float *y = out + (size_t)n * C, *g = dout + (size_t)n * C;
        float *dx = dinp + (size_t)n * C, dot = trn__row_dot(g, y, C);
        int i;
        for (i = 0; i < C; i++) dx[i] += y[i] * (g[i] - dot);
    }
}

/* --- RMSNorm (Zhang & Sennrich 2019), as Llama uses it ----------------------
   y = x * r * w,  r = 1 / sqrt(mean(x^2) + eps) per row of C; w (C); no
   mean subtracted, no bias. Saved: the input x and r (N floats).
   Backward, with g = dy * w:  dx = r g - x r^3 mean(g x);  dw = sum_n dy x r. */
TRNDEF void trn_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *w, int N, int C,
                                float eps) {
    int n;
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        float *y = out + (size_t)n * C;
        double ss = 0.0;
        float r;
        int i;
        for (i = 0; i < C; i++) ss += (double)x[i] * x[i];
        r = (float)(1.0 / sqrt(ss / C + eps));
        for (i = 0; i < C; i++) y[i] = (x[i] * r) * w[i];
        rstd[n] = r;
    }
}
TRNDEF void trn_rmsnorm_backward(float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                                 const float *rstd, int N, int C) {
    int n, blk, nblk = (C + 63) / 64;
    if (dinp) {
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
        for (n = 0; n < N; n++) {
            const float *x = inp + (size_t)n * C, *dy = dout + (size_t)n * C;
            float *dx = dinp + (size_t)n * C, r = rstd[n], mgx = 0.0f;
            int i;
            for (i = 0; i < C; i++) mgx += dy[i] * w[i] * x[i];
            mgx = mgx / C * r * r * r;
            for (i = 0; i < C; i++) dx[i] += r * dy[i] * w[i] - x[i] * mgx;
        }
    }
    if (!dw) return;
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (blk = 0; blk < nblk; blk++) {
        int c0 = blk * 64, c1 = TRN__MIN(C, c0 + 64), row, c;
        float acc[64];
        for (c = 0; c < 64; c++) acc[c] = 0.0f;
        for (row = 0; row < N; row++) {
            const float *x = inp + (size_t)row * C, *dy = dout + (size_t)row * C;
            float r = rstd[row];
            for (c = c0; c < c1; c++) acc[c - c0] += dy[c] * (x[c] * r);
        }
        for (c = c0; c < c1; c++) dw[c] += acc[c - c0];
    }
}

/* --- RoPE, rotary position embedding (Su et al. 2021), HF rotate-half -------
   Each rotated head of hs channels is two halves x1 = x[0:hs/2], x2 =
   x[hs/2:hs]; channel pair (i, i + hs/2) turns by the angle p * f_i, with
   p the position and f_i = theta^(-2i/hs):
      y1 = x1 cos - x2 sin,   y2 = x2 cos + x1 sin
   (Hugging Face's rotate_half; Meta's original pairs neighbours (2i, 2i+1)
   instead, and HF's conversion permutes the q/k weight rows so that both
   compute the same attention: HF checkpoints load as they are.)
   A rotation is orthogonal, so backward turns the gradient back:
      dx1 = dy1 cos + dy2 sin,   dx2 = dy2 cos - dy1 sin.
   Saved: nothing (the angles are recomputed). Angles in double: p * f_i
   reaches thousands of radians, where float would lose the phase. */
static void trn__rope_rows(float *y, const float *x, int B, int T, int H, int R, int hs, int pos0, float theta,
                           const trn_rope_scaling *sc, int inverse) {
    int bt, t, half = hs / 2;
    size_t row = (size_t)H * hs;
    /* the (T, hs/2) cos and sin once; every batch row uses the same ones */
    float *cs = (float *)trn_alloc(sizeof(float) * 2 * (size_t)T * (size_t)half, TRN_KIND_TEMP);
    if (!cs) trn_fatal("trn_rope: %s", trn_error_reason());
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (t = 0; t < T; t++) {
        int i;
        for (i = 0; i < half; i++) {
            double a = (double)(pos0 + t) * trn_rope_inv_freq(i, hs, theta, sc, pos0 + T);
            cs[2 * ((size_t)t * half + i)] = (float)cos(a);
            cs[2 * ((size_t)t * half + i) + 1] = (float)(inverse ? -sin(a) : sin(a));
        }
    }
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (bt = 0; bt < B * T; bt++) {
        const float *xr = x + (size_t)bt * row, *cst = cs + 2 * (size_t)(bt % T) * half;
        float *yr = y + (size_t)bt * row;
        int h, i;
        for (h = 0; h < R; h++)
            for (i = 0; i < half; i++) {
                float c = cst[2 * i], s = cst[2 * i + 1];
                float x1 = xr[h * hs + i], x2 = xr[h * hs + i + half];
                yr[h * hs + i] += x1 * c - x2 * s;
                yr[h * hs + i + half] += x2 * c + x1 * s;
            }
        for (i = R * hs; i < H * hs; i++) yr[i] += xr[i]; /* v heads: as they are */
    }
    trn_free(cs);
}
TRNDEF void trn_rope_forward(float *out, const float *inp, int B, int T, int H, int R, int hs, int pos0,
                             float theta, const trn_rope_scaling *sc) {
    memset(out, 0, sizeof(float) * (size_t)B * T * H * hs);
    trn__rope_rows(out, inp, B, T, H, R, hs, pos0, theta, sc, 0);
}
TRNDEF void trn_rope_backward(float *dinp, const float *dout, int B, int T, int H, int R, int hs, int pos0,
                              float theta, const trn_rope_scaling *sc) {
    if (dinp) trn__rope_rows(dinp, dout, B, T, H, R, hs, pos0, theta, sc, 1);
}

/* ========================================================================
   >>ops3: dropout, transpose, slice and concat, sums, batched matmul, and
   four more losses. Same conventions: forward above backward, backward
   ACCUMULATES, NULL gradient outputs are skipped.
   ======================================================================== */

/* --- dropout (Srivastava et al. 2014), "inverted": kept values are scaled
   by 1/(1-p) in training so that evaluation is the identity.
   The mask is not stored: element i of a call is kept when the uniform
   u(key, i) >= p, where key is one number drawn from the model's RNG per
   call and u hashes (key, i) with splitmix64's mixer. Backward recomputes
   the same bits from the key (saved: 8 bytes instead of a mask), and the
   CUDA kernel computes the same u, so both backends drop the same
   elements. p = 1 drops everything (out = 0, as torch).                  */
static inline float trn__dropout_u(uint64_t key, size_t i) {
    uint64_t z = key + (uint64_t)(i + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (float)(z >> 40) * (1.0f / 16777216.0f); /* top 24 bits: [0,1) */
}
TRNDEF void trn_dropout_forward(float *out, const float *inp, size_t n, float p, uint64_t key) {
    float scale = p < 1.0f ? 1.0f / (1.0f - p) : 0.0f;
    ptrdiff_t i;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) if (n > 32768)
#endif
    for (i = 0; i < (ptrdiff_t)n; i++) out[i] = trn__dropout_u(key, (size_t)i) >= p ? inp[i] * scale : 0.0f;
}
TRNDEF void trn_dropout_backward(float *dinp, const float *dout, size_t n, float p, uint64_t key) {
    float scale = p < 1.0f ? 1.0f / (1.0f - p) : 0.0f;
    ptrdiff_t i;
    if (!dinp) return;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) if (n > 32768)
#endif
    for (i = 0; i < (ptrdiff_t)n; i++) if (trn__dropout_u(key, (size_t)i) >= p) dinp[i] += dout[i] * scale;
}

/* --- transpose of two dims -------------------------------------------------
   Any swap of dims d0 < d1 of a row-major tensor is a swap in the 5-D view
   (A, D0, Bm, D1, C): A = the dims before d0, Bm = between, C = after d1.
     out[a][j][b][i][c] = inp[a][i][b][j][c]        out is (A, D1, Bm, D0, C)
   Backward is the same swap read the other way: dinp[a][i][b][j][c] +=
   dout[a][j][b][i][c]. Nothing saved. C contiguous floats move together. */
TRNDEF void trn_transpose_forward(float *out, const float *inp, int A, int D0, int Bm, int D1, int C) {
    ptrdiff_t r;
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (r = 0; r < (ptrdiff_t)A * D0; r++) {
        size_t a = (size_t)r / D0, i = (size_t)r % D0, b, j;
        for (b = 0; b < (size_t)Bm; b++)
            for (j = 0; j < (size_t)D1; j++)
                memcpy(out + (((a * D1 + j) * Bm + b) * D0 + i) * C, inp + (((a * D0 + i) * Bm + b) * D1 + j) * C,
                       sizeof(float) * (size_t)C);
    }
}
TRNDEF void trn_transpose_backward(float *dinp, const float *dout, int A, int D0, int Bm, int D1, int C) {
    ptrdiff_t r;
    if (!dinp) return;
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (r = 0; r < (ptrdiff_t)A * D0; r++) { /* each thread owns whole rows of dinp */
        size_t a = (size_t)r / D0, i = (size_t)r % D0, b, j, c;
        for (b = 0; b < (size_t)Bm; b++)
            for (j = 0; j < (size_t)D1; j++) {
                float *d = dinp + (((a * D0 + i) * Bm + b) * D1 + j) * C;
                const float *g = dout + (((a * D1 + j) * Bm + b) * D0 + i) * C;
                for (c = 0; c < (size_t)C; c++) d[c] += g[c];
            }
    }
}

/* --- slice and concat along the last dim --------------------------------
   slice: inp (N,C) -> out (N,len) = inp[:, start:start+len];
          dinp[:, start:start+len] += dout, the other columns get nothing.
   concat: a (N,Ca), b (N,Cb) -> out (N,Ca+Cb) = [a | b];
          da += dout[:, :Ca], db += dout[:, Ca:]. Nothing saved.         */
TRNDEF void trn_slice_forward(float *out, const float *inp, int N, int C, int start, int len) {
    ptrdiff_t n;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) if ((size_t)N * len > 32768)
#endif
    for (n = 0; n < N; n++) memcpy(out + (size_t)n * len, inp + (size_t)n * C + start, sizeof(float) * (size_t)len);
}
static void trn__add_to(float *d, const float *s, size_t n) { size_t i; for (i = 0; i < n; i++) d[i] += s[i]; }
TRNDEF void trn_slice_backward(float *dinp, const float *dout, int N, int C, int start, int len) {
    ptrdiff_t n;
    if (!dinp) return;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) if ((size_t)N * len > 32768)
#endif
    for (n = 0; n < N; n++) trn__add_to(dinp + (size_t)n * C + start, dout + (size_t)n * len, (size_t)len);
}
TRNDEF void trn_concat_forward(float *out, const float *a, const float *b, int N, int Ca, int Cb) {
    ptrdiff_t n;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) if ((size_t)N * (Ca + Cb) > 32768)
#endif
    for (n = 0; n < N; n++) {
        memcpy(out + (size_t)n * (Ca + Cb), a + (size_t)n * Ca, sizeof(float) * (size_t)Ca);
        memcpy(out + (size_t)n * (Ca + Cb) + Ca, b + (size_t)n * Cb, sizeof(float) * (size_t)Cb);
    }
}
TRNDEF void trn_concat_backward(float *da, float *db, const float *dout, int N, int Ca, int Cb) {
    ptrdiff_t n;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) if ((size_t)N * (Ca + Cb) > 32768)
#endif
    for (n = 0; n < N; n++) {
        const float *g = dout + (size_t)n * (Ca + Cb);
        if (da) trn__add_to(da + (size_t)n * Ca, g, (size_t)Ca);
        if (db) trn__add_to(db + (size_t)n * Cb, g + Ca, (size_t)Cb);
    }
}

/* --- sum and mean over the last dim -------------------------------------
   inp (N,C) -> out (N): out[n] = scale * sum_c inp[n][c], scale 1 (sum)
   or 1/C (mean); the sum of a whole tensor is N = 1, C = its size.
   Backward: dinp[n][c] += scale * dout[n]. Nothing saved. The CPU adds in
   double, in order.                                                     */
TRNDEF void trn_sum_forward(float *out, const float *inp, int N, size_t C, float scale) {
    ptrdiff_t n;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) if ((size_t)N * C > 32768)
#endif
    for (n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        double s = 0.0;
        size_t c;
        for (c = 0; c < C; c++) s += x[c];
        out[n] = (float)(s * scale);
    }
}
TRNDEF void trn_sum_backward(float *dinp, const float *dout, int N, size_t C, float scale) {
    ptrdiff_t n;
    if (!dinp) return;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) if ((size_t)N * C > 32768)
#endif
    for (n = 0; n < N; n++) {
        float g = scale * dout[n], *d = dinp + (size_t)n * C;
        size_t c;
        for (c = 0; c < C; c++) d[c] += g;
    }
}

/* --- batched matmul: out[i] = op(a[i]) @ op(b[i]) for i < Bt ------------
   op(a) is (M,K), op(b) is (K,N), out (Bt,M,N); op(x) = x, or x^T when
   ta / tb is set (a stored (K,M), b stored (N,K)). Saved: a and b.
   Backward, per batch, with dC = dout[i]:
     dA += dC op(B)^T   (ta: dA += op(B) dC^T)
     dB += op(A)^T dC   (tb: dB += dC^T op(A))
   Each matrix is one trn_sgemm; threads split the batch when Bt > 1.   */
TRNDEF void trn_bmm_forward(float *out, const float *a, const float *b, int Bt, int M, int N, int K, int ta, int tb) {
    int i, lda = ta ? M : K, ldb = tb ? K : N;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) if (Bt > 1)
#endif
    for (i = 0; i < Bt; i++)
        trn_sgemm(ta, tb, M, N, K, 1.0f, a + (size_t)i * M * K, lda, b + (size_t)i * K * N, ldb, 0.0f,
                  out + (size_t)i * M * N, N);
}
TRNDEF void trn_bmm_backward(float *da, float *db, const float *dout, const float *a, const float *b, int Bt, int M,
                             int N, int K, int ta, int tb) {
    int i, lda = ta ? M : K, ldb = tb ? K : N;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) if (Bt > 1)
#endif
    for (i = 0; i < Bt; i++) {
        const float *A = a + (size_t)i * M * K, *Bm = b + (size_t)i * K * N, *dC = dout + (size_t)i * M * N;
        if (da && !ta) trn_sgemm(0, !tb, M, K, N, 1.0f, dC, N, Bm, ldb, 1.0f, da + (size_t)i * M * K, K);
        if (da && ta) trn_sgemm(tb, 1, K, M, N, 1.0f, Bm, ldb, dC, N, 1.0f, da + (size_t)i * M * K, M);
        if (db && !tb) trn_sgemm(!ta, 0, K, N, M, 1.0f, A, lda, dC, N, 1.0f, db + (size_t)i * K * N, N);
        if (db && tb) trn_sgemm(1, ta, N, K, M, 1.0f, dC, N, A, lda, 1.0f, db + (size_t)i * K * N, K);
    }
}

/* --- cross-entropy with an ignore index and label smoothing ---------------
   As torch.nn.functional.cross_entropy(ignore_index, label_smoothing).
   logits (N,Vp) with V real classes; targets (N), a target < 0 marks a
   row to ignore (the op maps ignore_index to -1). The smoothed target is
   q = (1-s) onehot(t) + s/V, so the row's loss is
     sum_v q_v (lse - l_v) = lse - (1-s) l_t - (s/V) sum_v l_v
   (ignored rows: loss 0). Saved: lse (N), as for trn_cross_entropy.
   Backward (dloss = 1/(rows not ignored) for the mean):
     dlogits[n,v] += dloss * (p_v - q_v);  ignored rows and padding: 0.  */
TRNDEF void trn_cross_entropy_ex_forward(float *losses, float *lse, const float *logits, const int *targets, int N,
                                        int V, int Vp, float smoothing) {
    int n;
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (n = 0; n < N; n++) {
        const float *l = logits + (size_t)n * Vp;
        float mx;
        double sum = 0.0;
        int v;
        if (targets[n] < 0) { losses[n] = 0.0f; lse[n] = 0.0f; continue; }
        mx = trn__row_max(l, V);
        lse[n] = mx + (float)log(trn__row_sum_exp(l, V, mx));
        if (smoothing != 0.0f) for (v = 0; v < V; v++) sum += l[v];
        losses[n] = (float)((double)lse[n] - (1.0 - smoothing) * l[targets[n]] - smoothing * sum / V);
    }
}
TRNDEF void trn_cross_entropy_ex_backward(float *dlogits, const float *logits, const float *lse, const int *targets,
                                         float dloss, int N, int V, int Vp, float smoothing) {
    int n;
    if (!dlogits) return;
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (n = 0; n < N; n++) {
        const float *l = logits + (size_t)n * Vp;
        float *d = dlogits + (size_t)n * Vp, m = lse[n], u = smoothing / (float)V;
        int v;
        if (targets[n] < 0) continue;
        for (v = 0; v < V; v++) d[v] += dloss * (trn__expf(l[v] - m) - u);
        d[targets[n]] -= dloss * (1.0f - smoothing);
    }
}

/* --- binary cross-entropy on logits (torch BCEWithLogitsLoss) -------------
   x logits, y targets in [0,1] (soft labels welcome), elementwise:
     loss = max(x,0) - x y + log(1 + e^-|x|)     (never exponentiates a
                                                  large positive number)
   Backward: dx += dloss * (sigmoid(x) - y). Saved: the targets.          */
TRNDEF void trn_bce_with_logits_forward(float *losses, const float *x, const float *y, size_t n) {
    ptrdiff_t i;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) if (n > 32768)
#endif
    for (i = 0; i < (ptrdiff_t)n; i++) losses[i] = (x[i] > 0.0f ? x[i] : 0.0f) - x[i] * y[i] + log1pf(expf(-fabsf(x[i])));
}
TRNDEF void trn_bce_with_logits_backward(float *dx, const float *x, const float *y, float dloss, size_t n) {
    ptrdiff_t i;
    if (!dx) return;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) if (n > 32768)
#endif
    for (i = 0; i < (ptrdiff_t)n; i++) {
        float e = expf(-fabsf(x[i])), s = x[i] >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e); /* sigmoid, stable */
        dx[i] += dloss * (s - y[i]);
    }
}

/* --- L1 and Huber (torch L1Loss, HuberLoss), elementwise on d = pred - target:
     L1:    |d|;                     dpred += dloss * sign(d)   (0 at d = 0)
     Huber: d^2 / 2        if |d| < delta,  dpred += dloss * d
            delta (|d| - delta/2) else,     dpred += dloss * delta * sign(d)
   Huber is quadratic near 0 (like MSE/2) and linear in the tails (like
   L1 times delta), so outliers pull with a bounded force. Saved: target. */
TRNDEF void trn_l1_forward(float *losses, const float *pred, const float *target, size_t n) {
    ptrdiff_t i;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) if (n > 32768)
#endif
    for (i = 0; i < (ptrdiff_t)n; i++) losses[i] = fabsf(pred[i] - target[i]);
}
TRNDEF void trn_l1_backward(float *dpred, const float *pred, const float *target, float dloss, size_t n) {
    ptrdiff_t i;
    if (!dpred) return;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) if (n > 32768)
#endif
    for (i = 0; i < (ptrdiff_t)n; i++) {
        float d = pred[i] - target[i];
        dpred[i] += d > 0.0f ? dloss : d < 0.0f ? -dloss : 0.0f;
    }
}
TRNDEF void trn_huber_forward(float *losses, const float *pred, const float *target, float delta, size_t n) {
    ptrdiff_t i;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) if (n > 32768)
#endif
    for (i = 0; i < (ptrdiff_t)n; i++) {
        float d = pred[i] - target[i], a = fabsf(d);
        losses[i] = a < delta ? 0.5f * d * d : delta * (a - 0.5f * delta);
    }
}
TRNDEF void trn_huber_backward(float *dpred, const float *pred, const float *target, float delta, float dloss, size_t n) {
    ptrdiff_t i;
    if (!dpred) return;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) if (n > 32768)
#endif
    for (i = 0; i < (ptrdiff_t)n; i++) {
        float d = pred[i] - target[i];
        dpred[i] += dloss * (fabsf(d) < delta ? d : d > 0.0f ? delta : -delta);
    }
}

/* --- attention over a key/value cache (generation: extras/train_generate.h) -
   q (B,T,*) with row stride q_stride, head h at column h*hs; k, v (B,T,*)
   with row stride kv_stride, kv head g at column g*hs; the caches
   (B,maxT,Ckv), Ckv = NKV*hs. First the T new keys and values go to rows
   pos..pos+T-1 of the caches; then, per (b,h), with P = pos + T:
     S (T,P) = Q K^T / sqrt(hs);  row t sees columns 0..pos+t (causal);
     A = softmax_rows(S);  O (T,hs) = A V
   att holds S/A: (B,NH,T,P). out (B,T,NH*hs). No backward.              */
TRNDEF void trn_attention_cached_forward(float *out, float *att, const float *q, int q_stride, const float *k,
                                     const float *v, int kv_stride, float *kcache, float *vcache, int B, int T,
                                     int pos, int maxT, int NH, int NKV, int hs) {
    int Ckv = NKV * hs, C = NH * hs, P = pos + T, grp = NH / NKV, bh, b, t;
    float scale = 1.0f / sqrtf((float)hs);
    for (b = 0; b < B; b++)
        for (t = 0; t < T; t++) {
            size_t dst = ((size_t)b * maxT + pos + t) * Ckv, src = ((size_t)b * T + t) * kv_stride;
            memcpy(kcache + dst, k + src, sizeof(float) * (size_t)Ckv);
            memcpy(vcache + dst, v + src, sizeof(float) * (size_t)Ckv);
        }
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (bh = 0; bh < B * NH; bh++) {
        int bb = bh / NH, h = bh % NH, g = h / grp, tt, s;
        const float *qh = q + (size_t)bb * T * q_stride + (size_t)h * hs;
        const float *kh = kcache + (size_t)bb * maxT * Ckv + (size_t)g * hs, *vh = vcache + (size_t)bb * maxT * Ckv + (size_t)g * hs;
        float *S = att + (size_t)bh * T * P;
        trn_sgemm(0, 1, T, P, hs, scale, qh, q_stride, kh, Ckv, 0.0f, S, P);
        for (tt = 0; tt < T; tt++) {
            float *row = S + (size_t)tt * P, mx, sum;
            int last = pos + tt;
            mx = trn__row_max(row, last + 1);
            for (s = 0; s <= last; s++) row[s] = trn__expf(row[s] - mx);
            sum = trn__row_sum(row, last + 1);
            for (s = 0; s <= last; s++) row[s] /= sum;
            for (s = last + 1; s < P; s++) row[s] = 0.0f;
        }
        trn_sgemm(0, 0, T, hs, P, 1.0f, S, P, vh, Ckv, 0.0f, out + (size_t)bb * T * C + (size_t)h * hs, C);
    }
}

/* ========================================================================
   >>backend (CPU): the table points at the functions above
   ======================================================================== */
static void trn__cpu_zero(void *p, size_t bytes) { memset(p, 0, bytes); }
static void trn__cpu_copy(void *dst, const void *src, size_t bytes) { memcpy(dst, src, bytes); }
static void trn__cpu_sync(void) {}
/* the CPU's convert: everything is fp32 here; the threaded kernels where
   they do the same (ZeRO-2 adds gradient buckets with it) */
static void trn__cpu_convert(void *dst, int dt, const void *src, int st, size_t n, int accumulate, float s) {
    if (dt == TRN_F32 && st == TRN_F32 && s == 1.0f) {
        if (accumulate) trn_accumulate((float *)dst, (const float *)src, n);
        else if (dst != src) memmove(dst, src, n * sizeof(float));
        return;
    }
    trn__convert_host(dst, dt, src, st, n, accumulate, s);
}
/* the mean of a loss's rows, summed in double in row order */
static void trn__cpu_mean(float *out, const float *x, size_t n) {
    double sum = 0.0;
    size_t i;
    for (i = 0; i < n; i++) sum += x[i];
    out[0] = (float)(sum / (double)n);
}

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
        cpu.matmul_forward = trn_linear_forward;
        cpu.matmul_backward = trn_linear_backward;
        cpu.embedding_forward = trn_embedding_forward;
        cpu.embedding_backward = trn_embedding_backward;
        cpu.layernorm_forward = trn_layernorm_forward;
        cpu.layernorm_backward = trn_layernorm_backward;
        cpu.gelu_forward = trn_gelu_forward;
        cpu.gelu_backward = trn_gelu_backward;
        cpu.matmul_dgelu_backward = trn_matmul_dgelu_backward; /* (matmul_gelu_forward: the plain pair) */
        cpu.relu_forward = trn_relu_forward;
        cpu.relu_backward = trn_relu_backward;
        cpu.add_forward = trn_add_forward;
        cpu.accumulate = trn_accumulate;
        cpu.attention_forward = trn_attention_forward;
        cpu.attention_backward = trn_attention_backward;
        cpu.crossentropy_forward = trn_cross_entropy_forward;
        cpu.crossentropy_backward = trn_cross_entropy_backward;
        cpu.crossentropy_fused = trn_crossentropy_fused;
        cpu.mse_forward = trn_mse_forward;
        cpu.mse_backward = trn_mse_backward;
        cpu.meanpool_forward = trn_mean_pool_forward;
        cpu.meanpool_backward = trn_mean_pool_backward;
        cpu.adamw_update = trn_adamw_update;
        cpu.sum_squares = trn_sum_squares;
        cpu.scale = trn_scale;
        cpu.mul_forward = trn_mul_forward;
        cpu.mul_backward = trn_mul_backward;
        cpu.silu_forward = trn_silu_forward;
        cpu.silu_backward = trn_silu_backward;
        cpu.sigmoid_forward = trn_sigmoid_forward;
        cpu.sigmoid_backward = trn_sigmoid_backward;
        cpu.tanh_forward = trn_tanh_forward;
        cpu.tanh_backward = trn_tanh_backward;
        cpu.softmax_forward = trn_softmax_forward;
        cpu.softmax_backward = trn_softmax_backward;
        cpu.rmsnorm_forward = trn_rmsnorm_forward;
        cpu.rmsnorm_backward = trn_rmsnorm_backward;
        cpu.rope_forward = trn_rope_forward;
        cpu.rope_backward = trn_rope_backward;
        /* fused attention (flash-style) */
        cpu.flash_attention_forward = trn_flash_attention_forward;
        cpu.flash_attention_backward = trn_flash_attention_backward;
        cpu.sgd_update = trn_sgd_update;
        cpu.attention_kv_forward = trn_attention_cached_forward;
        cpu.dropout_forward = trn_dropout_forward;
        cpu.dropout_backward = trn_dropout_backward;
        cpu.transpose_forward = trn_transpose_forward;
        cpu.transpose_backward = trn_transpose_backward;
        cpu.slice_forward = trn_slice_forward;
        cpu.slice_backward = trn_slice_backward;
        cpu.concat_forward = trn_concat_forward;
        cpu.concat_backward = trn_concat_backward;
        cpu.sum_forward = trn_sum_forward;
        cpu.sum_backward = trn_sum_backward;
        cpu.bmm_forward = trn_bmm_forward;
        cpu.bmm_backward = trn_bmm_backward;
        cpu.crossentropy_ex_forward = trn_cross_entropy_ex_forward;
        cpu.crossentropy_ex_backward = trn_cross_entropy_ex_backward;
        cpu.bce_logits_forward = trn_bce_with_logits_forward;
        cpu.bce_logits_backward = trn_bce_with_logits_backward;
        cpu.l1_forward = trn_l1_forward;
        cpu.l1_backward = trn_l1_backward;
        cpu.huber_forward = trn_huber_forward;
        cpu.huber_backward = trn_huber_backward;
        /* >>sync-free step: the CPU has no wait to save. No grad_norm_clip
           or adamw_flat: trn_clip_grad_norm_async is trn_clip_grad_norm
           here and AdamW keeps its call per tensor, bit for bit as before */
        cpu.download_async = trn__cpu_copy;
        cpu.mean = trn__cpu_mean;
        cpu.act_dtype = TRN_F32;
        cpu.convert = trn__cpu_convert;
        cpu.grad_norm_clip = NULL;
        cpu.adamw_flat = NULL;
        /* <<sync-free step */
        cpu.name = "cpu";
    }
    return &cpu;
}

/* ========================================================================
   >>tape
   ======================================================================== */
#define TRN__TBLOCK 256 /* tensor headers per block of the host pool */
static void trn__prof_mark(trn_model *m, const char *op, int phase); /* >>profile */
static void trn__prof_end(trn_model *m);

TRNDEF trn_result trn_model_init(trn_model *m, const trn_backend *backend) {
    if (!m) return trn_fail(TRN_ERR_INVALID, "trn_model_init: model is NULL");
    memset(m, 0, sizeof *m);
    m->backend = backend ? backend : trn_cpu_backend();
    m->act_dtype = m->backend->act_dtype;
    m->grad_enabled = 1;
    m->training = 1;
    trn_rng_seed(&m->rng, 0);
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
    t->lr_scale = 1.0f;        /* parameter groups: see trn_param_group   */
    t->weight_decay = -1.0f;   /* -1: the optimizer's weight decay        */
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
    m->act_dtype = m->backend->act_dtype; /* (a precision set after trn_model_init still counts) */
    m->param_data = (float *)m->backend->alloc(m->n_floats * sizeof(float), TRN_KIND_WEIGHTS);
    if (!m->param_data) return trn_fail(TRN_ERR_NOMEM, "trn_model_alloc: %s", trn_error_reason());
    m->backend->zero(m->param_data, m->n_floats * sizeof(float));
    for (i = 0; i < m->n_params; i++) m->params[i]->data = m->param_data + m->params[i]->offset;
    if (m->act_dtype == TRN_BF16) { /* the copy kernels read; the master stays fp32 */
        m->mp.param_bf16 = m->backend->alloc(m->n_floats * 2, TRN_KIND_WEIGHTS_BF16);
        if (!m->mp.param_bf16) return trn_fail(TRN_ERR_NOMEM, "trn_model_alloc: bf16 weights: %s", trn_error_reason());
        for (i = 0; i < m->n_params; i++) {
            m->params[i]->data = (float *)((uint16_t *)m->mp.param_bf16 + m->params[i]->offset);
            m->params[i]->dtype = TRN_BF16;
        }
        m->mp.param_bf16_stale = 1;
    }
    return TRN_OK;
}

/* bf16: rewrite the weights' copy from the fp32 master (after anything
   but AdamW changed the master: init, a checkpoint, a broadcast) */
static void trn__refresh_bf16(trn_model *m) {
    size_t lo = m->shard.param_hi ? m->shard.param_lo : 0, hi = m->shard.param_hi ? m->shard.param_hi : m->n_floats;
    if (m->mp.param_bf16 && hi > lo)
        m->backend->convert((uint16_t *)m->mp.param_bf16 + lo, TRN_BF16, m->param_data + lo, TRN_F32, hi - lo, 0, 1.0f);
    m->mp.param_bf16_stale = 0;
}
TRNDEF void trn_params_changed(trn_model *m) { if (m && m->mp.param_bf16) m->mp.param_bf16_stale = 1; }

/* a parameter's gradient is fp32; an activation's has its dtype */
static int trn__grad_dtype(const trn_tensor *t) { return t->is_param ? TRN_F32 : t->dtype; }
/* where t's fp32 values live: a parameter's master under bf16, else data */
static float *trn__master(const trn_model *m, const trn_tensor *t) {
    return t->is_param && m->mp.param_bf16 ? m->param_data + t->offset : t->data;
}
/* host floats <-> n elements of t at element off, converting to or from
   t's dtype (in chunks through a TEMP buffer). A parameter: its master. */
static void trn__put(trn_model *m, trn_tensor *t, size_t off, const float *host, size_t n) {
    size_t done;
    uint16_t *buf;
    if (t->is_param && m->mp.param_bf16) m->mp.param_bf16_stale = 1;
    if (t->dtype == TRN_F32 || (t->is_param && m->mp.param_bf16)) {
        m->backend->upload(trn__master(m, t) + off, host, n * sizeof(float));
        return;
    }
    buf = (uint16_t *)trn_alloc(TRN__MIN(n, (size_t)1 << 20) * 2, TRN_KIND_TEMP);
    if (!buf) trn_fatal("trn_write %s: %s", t->name, trn_error_reason());
    for (done = 0; done < n; done += (size_t)1 << 20) {
        size_t k = TRN__MIN((size_t)1 << 20, n - done);
        trn__convert_host(buf, TRN_BF16, host + done, TRN_F32, k, 0, 1.0f);
        m->backend->upload((uint16_t *)t->data + off + done, buf, k * 2);
    }
    trn_free(buf);
}
static void trn__get(trn_model *m, const void *src, int dtype, float *host, size_t n) {
    if (dtype == TRN_F32) { m->backend->download(host, src, n * sizeof(float)); return; }
    /* bf16: into the upper halves of host, then widened in place from the
       front (element i is written at bytes [4i,4i+4), above no unread one) */
    m->backend->download((uint16_t *)host + n, src, n * 2);
    trn__convert_host(host, TRN_F32, (uint16_t *)host + n, TRN_BF16, n, 0, 1.0f);
}

TRNDEF trn_result trn_model_alloc_grads(trn_model *m) {
    int i;
    if (!m || !m->param_data) return trn_fail(TRN_ERR_INVALID, "trn_model_alloc_grads: call trn_model_alloc first");
    if (m->grad_data) return TRN_OK;
    m->grad_data = (float *)m->backend->alloc(m->n_floats * sizeof(float), TRN_KIND_GRADS);
    if (!m->grad_data) return trn_fail(TRN_ERR_NOMEM, "trn_model_alloc_grads: %s", trn_error_reason());
    m->backend->zero(m->grad_data, m->n_floats * sizeof(float));
    for (i = 0; i < m->n_params; i++) {
        m->params[i]->grad = m->grad_data + m->params[i]->offset;
        m->params[i]->grad_zero = 1; /* (zeroed just above) */
    }
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

static void trn__grads_release_all(trn_model *m);
static void trn__grads_grow(trn_model *m);

TRNDEF void trn_model_free(trn_model *m) {
    int i;
    if (!m) return;
    trn__arena_free_all(m);
    trn__grads_release_all(m);
    if (m->grads.base) m->backend->free(m->grads.base);
    free(m->grads.live);
    free(m->regions);
    for (i = 0; i < m->n_tblocks; i++) trn_free(m->tblocks[i]);
    free(m->tblocks);
    if (m->param_data) m->backend->free(m->param_data + m->shard.param_lo); /* (sharding: its slice) */
    if (m->grad_data) m->backend->free(m->grad_data + m->shard.grad_lo);
    if (m->mp.param_bf16) m->backend->free(m->mp.param_bf16);
    for (i = 0; i < m->n_params; i++) trn_free(m->params[i]);
    trn_free(m->params);
    trn_free(m->tape);
    if (m->sync_free.gstat) m->backend->free(m->sync_free.gstat);
    memset(m, 0, sizeof *m);
}

TRNDEF void trn_zero_grad(trn_model *m) {
    int i;
    if (m && m->grad_data && m->shard.grad_hi) /* sharding: only the slice exists */
        m->backend->zero(m->grad_data + m->shard.grad_lo, (m->shard.grad_hi - m->shard.grad_lo) * sizeof(float));
    else if (m && m->grad_data) {
        m->backend->zero(m->grad_data, m->n_floats * sizeof(float));
        /* every parameter's gradient is zero now (its view of grad_data): the
           first backward to reach it may write it (trn_tensor's grad_zero) */
        for (i = 0; i < m->n_params; i++)
            m->params[i]->grad_zero = m->params[i]->grad == m->grad_data + m->params[i]->offset;
    }
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
    trn__grads_release_all(m);
    trn__grads_grow(m);
    m->n_regions = 0;
    if (a->n_spill || a->high > a->cap) { /* (recompute may have freed its spills) */
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
    m->shard.unit_cur = NULL; /* a forward starts outside every unit (>>units) */
    m->tape_len = 0;
    if (m->profile) { m->profile->n_marks = 0; trn__prof_mark(m, NULL, -1); } /* a pass starts */
}

/* a parameter used before trn_model_alloc has no memory: stop, naming the call */
static void trn__need_alloc(const trn_model *m, const char *call, const char *name) {
    if (m && m->n_params > 0 && !m->param_data)
        trn_fatal("%s%s%s: the model's parameters have no memory yet: call trn_model_alloc(&model) after the "
                  "trn_param calls and before the first op, init or read", call, name ? " " : "", name ? name : "");
}

TRNDEF trn_tensor *trn_tensor_new_dtype(trn_model *m, const char *name, int ndim, const int *shape, int dtype) {
    trn_tensor *t;
    if (!m) trn_fatal("trn_tensor_new %s: model is NULL", name ? name : "");
    trn__need_alloc(m, "trn_tensor_new", name);
    trn__check_shape("trn_tensor_new", name, ndim, shape);
    if (m->mp.param_bf16_stale) trn__refresh_bf16(m); /* the first op of a pass reads fresh weights */
    t = trn__header(m);
    trn__fill_header(t, name, ndim, shape);
    t->dtype = dtype;
    t->data = (float *)trn_arena_alloc(m, t->size * trn_dtype_size(dtype));
    return t;
}
TRNDEF trn_tensor *trn_tensor_new(trn_model *m, const char *name, int ndim, const int *shape) {
    if (!m) trn_fatal("trn_tensor_new %s: model is NULL", name ? name : "");
    return trn_tensor_new_dtype(m, name, ndim, shape, m->act_dtype);
}

TRNDEF trn_tensor *trn_input(trn_model *m, const char *name, int ndim, const int *shape,
                             const float *host) {
    trn_tensor *t;
    if (!host) trn_fatal("trn_input %s: host data is NULL (for an arena tensor filled later, use trn_tensor_new)", name ? name : "");
    t = trn_tensor_new(m, name, ndim, shape);
    trn__put(m, t, 0, host, t->size); /* (bf16: rounded on the host) */
    return t;
}

/* --- the gradient arena ----------------------------------------------------
   The gradient of an activation lives from the first backward that writes
   it to the backward of the op that produced it (which reads it to push
   gradients further down); then its bytes are reused. Residual streams make
   these lifetimes overlap without nesting (x_l's gradient is born before
   x_{l+1}'s dies), so this is not a stack but a first-fit allocator: the
   live spans, sorted by offset, and a new span goes into the first gap that
   holds it. Offsets are virtual and the space never fills: a span that ends
   beyond the block (the first step, when there is no block yet) gets memory
   of its own, and the end of that backward (or trn_reset) sizes the block
   to the highest end seen, so the same step again runs inside the block
   with no allocation. The same allocator serves short-lived scratch (the
   classifier's chunks, a recompute region's output on its way out). */
static void *trn__grads_alloc(trn_model *m, size_t bytes) {
    trn_grad_arena *g = &m->grads;
    size_t need = (bytes + 63) & ~(size_t)63, off = 0;
    int i, at;
    if (need == 0) need = 64;
    for (at = 0; at < g->n_live; at++) { /* first gap that holds `need` */
        if (g->live[at].off >= off + need) break;
        off = g->live[at].off + g->live[at].bytes;
    }
    if (g->n_live == g->cap_live) {
        int cap = g->cap_live ? 2 * g->cap_live : 32;
        trn_grad_span *nl = (trn_grad_span *)realloc(g->live, sizeof(trn_grad_span) * (size_t)cap);
        if (!nl) trn_fatal("activation gradients: out of host memory for the span table");
        g->live = nl;
        g->cap_live = cap;
    }
    for (i = g->n_live; i > at; i--) g->live[i] = g->live[i - 1];
    g->n_live++;
    g->live[at].off = off;
    g->live[at].bytes = need;
    if (g->base && off + need <= g->cap) {
        g->live[at].ptr = g->base + off;
    } else {
        g->live[at].ptr = (char *)m->backend->alloc(need, TRN_KIND_ACT_GRADS);
        if (!g->live[at].ptr) {
            trn_ledger_print("out of memory");
            trn_fatal("activation gradients: cannot allocate %zu bytes: %s", need, trn_error_reason());
        }
    }
    if (off + need > g->high) g->high = off + need;
    g->handed_out += need;
    return g->live[at].ptr;
}

/* give a span back; returns 0 (and does nothing) when p is not one */
static int trn__grads_free(trn_model *m, void *p) {
    trn_grad_arena *g = &m->grads;
    int i;
    if (!p) return 0;
    for (i = 0; i < g->n_live; i++)
        if (g->live[i].ptr == (char *)p) break;
    if (i == g->n_live) return 0;
    if (!(g->base && g->live[i].off + g->live[i].bytes <= g->cap)) m->backend->free(p); /* its own memory */
    for (; i + 1 < g->n_live; i++) g->live[i] = g->live[i + 1];
    g->n_live--;
    return 1;
}

static void trn__grads_release_all(trn_model *m) {
    while (m->grads.n_live) trn__grads_free(m, m->grads.live[m->grads.n_live - 1].ptr);
}

/* with nothing live: make the block as large as the most any step used */
static void trn__grads_grow(trn_model *m) {
    trn_grad_arena *g = &m->grads;
    if (g->n_live || g->high <= g->cap) return;
    if (g->base) m->backend->free(g->base);
    g->base = (char *)m->backend->alloc(g->high, TRN_KIND_ACT_GRADS);
    if (!g->base) {
        trn_ledger_print("out of memory");
        trn_fatal("activation gradients: cannot allocate the %zu-byte block: %s", g->high, trn_error_reason());
    }
    g->cap = g->high;
}

/* THE way a backward gets the gradient buffer of a tensor it pushes into
   (the kit's ops and user ops alike). Parameters: their view of the flat
   gradient buffer. Activations: a span of the gradient arena, created on
   the first call, freed by trn_backward right after the backward of the
   op that produced t (t->grad is then NULL again; only parameters and
   tensors no op produced, like inputs, keep a gradient after trn_backward).
     fresh == NULL: a newly created buffer is zeroed; the caller accumulates
                    (+=), which is always right.
     fresh != NULL: a newly created buffer is NOT zeroed and *fresh = 1: the
                    caller must then WRITE (=) every element; *fresh = 0:
                    the buffer holds a partial sum, the caller accumulates.
   The second form saves a memset and a read of the buffer; use it where a
   backward can overwrite (a copy, a beta = 0 product). */
static float *trn__grad(trn_model *m, trn_tensor *t, int *fresh) {
    if (fresh) *fresh = 0;
    t->grad_zero = 0; /* whoever asks may add to it */
    if (!t->grad) {
        size_t bytes = t->size * trn_dtype_size(trn__grad_dtype(t));
        t->grad = (float *)trn__grads_alloc(m, bytes);
        if (fresh) *fresh = 1;
        else m->backend->zero(t->grad, bytes);
    }
    return t->grad;
}

/* gradient pointer for an input, or NULL when that input needs none */
static float *trn__want(trn_model *m, trn_tensor *t, int *fresh) {
    if (fresh) *fresh = 0;
    return (t && t->requires_grad) ? trn__grad(m, t, fresh) : NULL;
}

TRNDEF float *trn_grad(trn_model *m, trn_tensor *t) { return trn__want(m, t, NULL); }

/* a parameter's gradient for a backward that can WRITE it: *zero = 2
   (trn__matmul_bw's TRN__ZERO) when it is known to be all zero
   (trn_tensor's grad_zero), so writing it is the same as adding to it,
   else 0; NULL when no gradient is wanted */
static float *trn__want_param(trn_model *m, trn_tensor *t, int *zero) {
    *zero = t && t->requires_grad && t->is_param && t->grad && t->grad == m->grad_data + t->offset && t->grad_zero
                ? 2 : 0;
    return trn__want(m, t, NULL);
}

/* --profile: op's forward has just run (see >>profile) */
static void trn__prof_forward(trn_model *m, const char *op) {
    if (m->profile && m->grad_enabled && !m->profile->in_backward) trn__prof_mark(m, op, 0);
}

/* the kit's ops record after their kernel ran (mark = 1: the profile's
   mark for the forward is taken here); trn_op_apply records before it
   runs the forward (mark = 0) and marks after */
static trn_tape_entry *trn__record_ex(trn_model *m, const char *op, trn_backward_fn bw, trn_tensor *out,
                                      trn_tensor *a, trn_tensor *b, trn_tensor *c, int mark) {
    trn_tape_entry *e;
    if (mark) trn__prof_forward(m, op);
    /* (an op may set it beforehand: a recompute region's parameters) */
    out->requires_grad = out->requires_grad || (a && a->requires_grad) || (b && b->requires_grad) || (c && c->requires_grad);
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
static trn_tape_entry *trn__record(trn_model *m, const char *op, trn_backward_fn bw, trn_tensor *out,
                                   trn_tensor *a, trn_tensor *b, trn_tensor *c) {
    return trn__record_ex(m, op, bw, out, a, b, c, 1);
}

/* run tape entries hi down to lo. After an entry's backward its output's
   gradient has been read for the last time: free it. (The entry is read
   again from the tape: a recompute region's backward appends to the tape,
   which may move it.) */
static void trn__backward_range(trn_model *m, int hi, int lo, int hooks) {
    int i;
    for (i = hi; i >= lo; i--) {
        trn_tape_entry *e = &m->tape[i];
        if (hooks && m->shard.backward_pre_hook) m->shard.backward_pre_hook(m, i, m->shard.backward_hook_user); /* ZeRO-2, FSDP */
        e = &m->tape[i];
        if (e->out->grad) { /* no gradient reached it: skip */
            if (m->profile) { /* --profile: a mark on each side of the call */
                m->profile->in_backward = 1;
                trn__prof_mark(m, NULL, -1);
                e->backward(m, e);
                trn__prof_mark(m, m->tape[i].op, 1);
                m->profile->in_backward = 0;
            } else e->backward(m, e);
            e = &m->tape[i];
            if (trn__grads_free(m, e->out->grad)) e->out->grad = NULL;
        }
        if (hooks && m->shard.backward_hook) m->shard.backward_hook(m, i, m->shard.backward_hook_user); /* DDP */
    }
}

TRNDEF void trn_backward(trn_model *m, trn_tensor *loss) { trn_backward_scaled(m, loss, 1.0f); }

TRNDEF void trn_backward_scaled(trn_model *m, trn_tensor *loss, float scale) {
    if (!m || !loss) trn_fatal("trn_backward: model or loss is NULL");
    if (loss->size != 1) {
        char s[64];
        trn_fatal("trn_backward: loss must be a scalar, got shape %s", trn_shape_str(loss, s, sizeof s));
    }
    if (!loss->requires_grad) trn_fatal("trn_backward: the loss does not depend on any parameter (was the tape off?)");
    if (m->tape_len == 0 && !loss->is_param)
        trn_fatal("trn_backward: the tape is empty: backward already ran on this step's tape (it is consumed, "
                  "as in PyTorch); run trn_reset and the forward pass again before the next trn_backward");
    if (!m->grad_data && trn_model_alloc_grads(m) != TRN_OK) {
        trn_ledger_print("out of memory");
        trn_fatal("trn_backward: %s", trn_error_reason());
    }
    /* the chain rule starts here: d(loss)/d(loss) = 1 (or the caller's scale) */
    if (trn__grad_dtype(loss) == TRN_BF16) { /* (a loss made of bf16 activations) */
        uint16_t h = trn__f32_to_bf16(scale);
        m->backend->upload(trn__grad(m, loss, NULL), &h, sizeof h);
    } else m->backend->upload(trn__grad(m, loss, NULL), &scale, sizeof scale);
    m->sync_free.grad_one = loss; /* its gradient is known on the host: trn__scalar_grad needs no download */
    m->sync_free.grad_one_value = scale;
    m->sync_free.clip_pending = 0; /* a clip factor belongs to the gradients it was computed from */
    if (m->profile) trn__prof_mark(m, NULL, -1);
    /* parameters used inside recompute regions are not on this tape, so a
       hook cannot tell when their gradients are final: no hook then */
    trn__backward_range(m, m->tape_len - 1, 0, m->n_regions == 0);
    { /* what runs after a backward (an all-reduce, a user's edit) may change
         any gradient: until the next trn_zero_grad none is known zero */
        int i;
        for (i = 0; i < m->n_params; i++) m->params[i]->grad_zero = 0;
    }
    m->sync_free.grad_one = NULL;
    m->tape_len = 0; /* the tape is consumed, as PyTorch frees its graph */
    trn__grads_grow(m); /* first step: now the block's size is known */
    if (m->profile) trn__prof_end(m);
}

TRNDEF int trn_set_grad_enabled(trn_model *m, int enabled) {
    int was;
    if (!m) trn_fatal("trn_set_grad_enabled: model is NULL");
    was = m->grad_enabled;
    m->grad_enabled = enabled != 0;
    return was;
}
TRNDEF int trn_no_grad(trn_model *m) { return trn_set_grad_enabled(m, 0); }
TRNDEF void trn_train(trn_model *m) { if (!m) trn_fatal("trn_train: model is NULL"); m->training = 1; }
TRNDEF void trn_eval(trn_model *m) { if (!m) trn_fatal("trn_eval: model is NULL"); m->training = 0; }

/* >>units implementation. The marker is a tape entry whose backward calls
   the hook: its input is a dummy that "requires grad" (so the entry is
   recorded) but is no parameter; its output's grad is set (so trn_backward
   does not skip it). saved[0]: the unit entered, saved[1]: the one left. */
static void trn__unit_bw(trn_model *m, trn_tape_entry *e) {
    if (m->shard.unit_hook) m->shard.unit_hook(m, (trn_tensor *)e->saved[1], TRN_UNIT_BACKWARD, m->shard.unit_hook_user);
}

TRNDEF void trn_unit(trn_model *m, trn_tensor *member) {
    trn_tensor *prev = m->shard.unit_cur;
    if (member && !member->is_param) trn_fatal("trn_unit: '%s' is not a parameter", member->name);
    m->shard.unit_cur = member;
    if (m->shard.unit_hook) m->shard.unit_hook(m, member, TRN_UNIT_FORWARD, m->shard.unit_hook_user);
    if (m->grad_enabled) {
        int one = 1;
        trn_tensor *dummy = trn_tensor_new(m, "unit", 1, &one), *out = trn_tensor_new(m, "unit", 1, &one);
        trn_tape_entry *e;
        dummy->requires_grad = 1;
        e = trn__record(m, "unit", trn__unit_bw, out, dummy, NULL, NULL);
        if (e) { e->saved[0] = member; e->saved[1] = prev; out->grad = out->data; }
    }
}

TRNDEF float trn_item(trn_model *m, const trn_tensor *t) {
    float v[2]; /* (room for trn__get's bf16 staging) */
    trn__get(m, trn__master(m, t), t->is_param ? TRN_F32 : t->dtype, v, 1);
    return v[0];
}
TRNDEF void trn_item_async(trn_model *m, const trn_tensor *t, float *dst) {
    if (t->dtype != TRN_F32) *dst = trn_item(m, t); /* losses are fp32: this is rare */
    else if (m->backend->download_async) m->backend->download_async(dst, t->data, sizeof(float));
    else m->backend->download(dst, t->data, sizeof(float));
}
TRNDEF void trn_sync(trn_model *m) { m->backend->sync(); }

TRNDEF void trn_scale_grads(trn_model *m, float s) {
    size_t lo, hi;
    if (!m || !m->grad_data) return; /* no backward yet: nothing to scale */
    lo = m->shard.grad_lo;
    hi = m->shard.grad_hi ? m->shard.grad_hi : m->n_floats;
    m->backend->scale(m->grad_data + lo, s, hi - lo);
}

TRNDEF const char *trn_backend_name(const trn_model *m) { return m && m->backend ? m->backend->name : "none"; }

TRNDEF trn_tensor *trn_last_position(trn_model *m, trn_tensor *x) {
    int B, T, C, b, shape[3];
    size_t es;
    trn_tensor *last;
    if (!m || !x) trn_fatal("trn_last_position: NULL argument");
    if (x->ndim != 3) trn_fatal("trn_last_position: x must be (B,T,C), got %d dims", x->ndim);
    B = x->shape[0], T = x->shape[1], C = x->shape[2];
    shape[0] = B, shape[1] = 1, shape[2] = C;
    last = trn_tensor_new_dtype(m, "last", 3, shape, x->dtype);
    es = trn_dtype_size(x->dtype); /* bytes per value: 4, or 2 in bf16 */
    for (b = 0; b < B; b++)
        m->backend->copy((char *)last->data + (size_t)b * C * es, (const char *)x->data + ((size_t)b * T + T - 1) * C * es,
                         es * (size_t)C);
    return last;
}
TRNDEF void trn_read(trn_model *m, const trn_tensor *t, float *host) {
    if (!t || !host) trn_fatal("trn_read: tensor or host buffer is NULL");
    if (t->is_param) trn__need_alloc(m, "trn_read", t->name);
    trn__get(m, trn__master(m, t), t->is_param ? TRN_F32 : t->dtype, host, t->size);
}
TRNDEF void trn_write(trn_model *m, trn_tensor *t, const float *host) {
    if (!t || !host) trn_fatal("trn_write: tensor or host data is NULL");
    if (t->is_param) trn__need_alloc(m, "trn_write", t->name);
    trn__put(m, t, 0, host, t->size);
}
static void trn__range(const char *call, const trn_tensor *t, const void *host, size_t offset, size_t n) {
    if (!t || !host) trn_fatal("%s: tensor or host buffer is NULL", call);
    if (offset > t->size || n > t->size - offset)
        trn_fatal("%s %s: elements [%zu,%zu) of %zu", call, t->name, offset, offset + n, t->size);
}
TRNDEF void trn_read_range(trn_model *m, const trn_tensor *t, size_t offset, float *host, size_t n) {
    int dt;
    trn__range("trn_read_range", t, host, offset, n);
    dt = t->is_param ? TRN_F32 : t->dtype;
    trn__get(m, TRN__AT(trn__master(m, t), offset, dt), dt, host, n);
}
TRNDEF void trn_write_range(trn_model *m, trn_tensor *t, size_t offset, const float *host, size_t n) {
    trn__range("trn_write_range", t, host, offset, n);
    trn__put(m, t, offset, host, n);
}
static void trn__params_range(const char *call, const trn_model *m, const void *host, size_t lo, size_t n) {
    size_t a = m->shard.param_hi ? m->shard.param_lo : 0, b = m->shard.param_hi ? m->shard.param_hi : m->n_floats;
    if (!host || !m->param_data) trn_fatal("%s: host buffer NULL or weights not allocated", call);
    if (lo < a || lo > b || n > b - lo) /* >>sharding: only this process's slice exists */
        trn_fatal("%s: elements [%zu,%zu) of the weights, which hold [%zu,%zu) here", call, lo, lo + n, a, b);
}
TRNDEF void trn_read_params(trn_model *m, size_t lo, float *host, size_t n) {
    trn__params_range("trn_read_params", m, host, lo, n);
    m->backend->download(host, m->param_data + lo, n * sizeof(float));
}
TRNDEF void trn_write_params(trn_model *m, size_t lo, const float *host, size_t n) {
    trn__params_range("trn_write_params", m, host, lo, n);
    m->backend->upload(m->param_data + lo, host, n * sizeof(float));
    m->backend->sync();
    trn_params_changed(m); /* bf16: the copy follows */
}
TRNDEF void trn_read_grad(trn_model *m, const trn_tensor *t, float *host) {
    if (t->grad) trn__get(m, t->grad, trn__grad_dtype(t), host, t->size);
    else memset(host, 0, t->size * sizeof(float));
}

/* fill a tensor from a host-side generator, in chunks, so that even a
   1.6 GB weight needs no second full-size copy */
static void trn__fill(trn_model *m, trn_tensor *t, float mean, float std, trn_rng *rng, int normal) {
    size_t chunk = 1u << 20, done;
    float *buf;
    if (!m || !t) trn_fatal("%s: model or tensor is NULL", normal ? "trn_init_normal" : "trn_init_const");
    if (normal && !rng) trn_fatal("trn_init_normal %s: rng is NULL", t->name);
    if (t->is_param) trn__need_alloc(m, normal ? "trn_init_normal" : "trn_init_const", t->name);
    if (m->backend->place == TRN_HOST && t->dtype == TRN_F32) {
        size_t i;
        for (i = 0; i < t->size; i++) t->data[i] = normal ? mean + std * trn_rng_normal(rng) : mean;
        return;
    }
    buf = (float *)trn_alloc(chunk * sizeof(float), TRN_KIND_TEMP);
    if (!buf) trn_fatal("trn_init: %s", trn_error_reason());
    for (done = 0; done < t->size; done += chunk) {
        size_t n = TRN__MIN(chunk, t->size - done), i;
        for (i = 0; i < n; i++) buf[i] = normal ? mean + std * trn_rng_normal(rng) : mean;
        trn__put(m, t, done, buf, n);
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

/* --- bf16 precision: what goes into a kernel's slots ----------------------
   Kernels read activations in the model's dtype and write their gradients
   in it, while a parameter's gradient is fp32. So a parameter in an
   activation slot (a learned position table added to x, a scale in trn_mul)
   or an fp32 tensor there (a loss, a statistic) goes through a cast: forward
   rounds its values into a new activation, backward adds that activation's
   gradient into its own (fp32) gradient. In fp32 (every CPU model) a cast
   never happens: trn__act returns x. */
static void trn__cast_bw(trn_model *m, trn_tape_entry *e) {
    trn_tensor *x = e->in[0];
    m->backend->convert(trn__grad(m, x, NULL), trn__grad_dtype(x), e->out->grad, e->out->dtype, x->size, 1, 1.0f);
}
static trn_tensor *trn__act(trn_model *m, trn_tensor *x) {
    trn_tensor *out;
    if (!x || (x->dtype == m->act_dtype && !(x->is_param && m->mp.param_bf16))) return x;
    out = trn_tensor_new(m, "cast", x->ndim, x->shape);
    m->backend->convert(out->data, out->dtype, trn__master(m, x), x->is_param ? TRN_F32 : x->dtype, x->size, 0, 1.0f);
    trn__record(m, "cast", trn__cast_bw, out, x, NULL, NULL);
    return out;
}
/* a weight slot (linear, embedding, layernorm, rmsnorm, the classifier):
   kernels add its gradient in fp32, which under bf16 only a parameter has */
static void trn__weight(const trn_model *m, const trn_tensor *w, const char *op) {
    if (w && m->mp.param_bf16 && !w->is_param)
        trn_fatal("%s: under bf16 precision a weight must be a parameter (its gradient is fp32); '%s' is an "
                  "activation: multiply activations with trn_bmm or trn_mul", op, w->name);
}

/* dinp (N,C), dw (OC,C, fp32) and dbias (OC, fp32) of a linear layer.
   Each flag says what may be done with that buffer's old contents:
     0  TRN__ADD    keep them: accumulate
     1  TRN__WRITE  none to keep (a fresh buffer, trn__grad's *fresh):
                    WRITE it (a beta = 0 product replaces memset + add)
     2  TRN__ZERO   they are zero (a parameter's grad_zero, see
                    trn__want_param): writing and adding are the same
   matmul_backward_ex gets the flags as they are and may write where one
   is not 0: the GEMMs with beta 0, and dbias from the dW GEMM's epilogue
   (cuBLASLt's BGRADB) instead of a column-sum pass; what it can only add
   to, it zeroes first where the flag is TRN__WRITE. The plain path zeroes
   what is TRN__WRITE and adds. */
enum { TRN__ADD = 0, TRN__WRITE = 1, TRN__ZERO = 2 };
static void trn__matmul_bw(trn_model *m, float *dinp, int write_dinp, float *dw, int write_dw, float *dbias,
                           int write_dbias, const float *dout, const float *inp, const float *w, int N, int C,
                           int OC) {
    const trn_backend *bk = m->backend;
    write_dinp = dinp ? write_dinp : TRN__ADD;
    write_dw = dw ? write_dw : TRN__ADD;
    write_dbias = dbias ? write_dbias : TRN__ADD;
    if (bk->matmul_backward_ex) {
        bk->matmul_backward_ex(dinp, dw, dbias, dout, inp, w, N, C, OC, write_dinp, write_dw, write_dbias);
        return;
    }
    if (write_dinp == TRN__WRITE) bk->zero(dinp, trn_dtype_size(m->act_dtype) * (size_t)N * C);
    if (write_dw == TRN__WRITE) bk->zero(dw, sizeof(float) * (size_t)OC * C);
    if (write_dbias == TRN__WRITE) bk->zero(dbias, sizeof(float) * (size_t)OC);
    bk->matmul_backward(dinp, dw, dbias, dout, inp, w, N, C, OC);
}

/* --- linear -------------------------------------------------------------- */
/* written with the public op API (>>opapi), as your ops are: forward and
   backward read the entry; the backend table picks the kernel, so one
   function serves both places. iarg: N, C, OC. Saves nothing: x and w are
   alive in backward. */
static void trn__linear_fw(trn_model *m, trn_tape_entry *e) {
    trn_tensor *x = e->in[0], *w = e->in[1], *b = e->in[2];
    m->backend->matmul_forward(e->out->data, x->data, w->data, b ? b->data : NULL, e->iarg[0], e->iarg[1], e->iarg[2]);
}
static void trn__linear_bw(trn_model *m, trn_tape_entry *e) {
    trn_tensor *x = e->in[0], *w = e->in[1], *b = e->in[2];
    int fresh, zw, zb;
    float *dx = trn__want(m, x, &fresh); /* fresh: x's first gradient, written (beta 0), not zeroed and added */
    float *dw = trn__want_param(m, w, &zw), *db = trn__want_param(m, b, &zb); /* zero: may be written */
    trn__matmul_bw(m, dx, fresh, dw, zw, db, zb, e->out->grad, x->data, w->data, e->iarg[0], e->iarg[1],
                   e->iarg[2]);
}
static const trn_op trn__linear_op = {"linear", trn__linear_fw, trn__linear_bw, trn__linear_fw, trn__linear_bw, 1};

TRNDEF trn_tensor *trn_linear(trn_model *m, trn_tensor *x, trn_tensor *w, trn_tensor *b) {
    int C, OC, N, shape[TRN_MAX_DIMS];
    trn_tensor *out;
    trn_op_args args;
    trn__not_null("trn_linear", m, x); trn__not_null("trn_linear", w, w);
    x = trn__act(m, x); trn__weight(m, w, "trn_linear"); trn__weight(m, b, "trn_linear");
    C = TRN__LAST(x);
    trn__need(w->ndim == 2 && w->shape[1] == C, "trn_linear", x, w, "input channels must match weight (OC,C)");
    OC = w->shape[0];
    if (b) trn__need(b->size == (size_t)OC, "trn_linear", w, b, "bias must have OC elements");
    N = (int)(x->size / (size_t)C);
    memcpy(shape, x->shape, sizeof shape);
    shape[x->ndim - 1] = OC;
    out = trn_tensor_new(m, "linear", x->ndim, shape);
    memset(&args, 0, sizeof args);
    args.i[0] = N; args.i[1] = C; args.i[2] = OC;
    trn_op_apply(m, &trn__linear_op, out, x, w, b, &args);
    return out;
}

/* --- embedding ------------------------------------------------------------ */
/* iarg: N = B T, C, and B when the B rows of ids are equal (positions:
   embedding_backward_rows sums the batch first), else 0 */
static void trn__embedding_bw(trn_model *m, trn_tape_entry *e) {
    trn_tensor *table = e->in[0];
    if (!table->requires_grad) return;
    if (e->iarg[2] > 1 && m->backend->embedding_backward_rows)
        m->backend->embedding_backward_rows(trn__grad(m, table, NULL), e->out->grad, (const int *)e->saved[0],
                                            e->iarg[2], e->iarg[0] / e->iarg[2], e->iarg[1]);
    else
        m->backend->embedding_backward(trn__grad(m, table, NULL), e->out->grad, (const int *)e->saved[0], e->iarg[0],
                                       e->iarg[1]);
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
    int shape[3], V, C, *dev, rows_equal, b;
    trn_tensor *out;
    trn_tape_entry *e;
    trn__not_null("trn_embedding", m, table); trn__not_null("trn_embedding", ids, ids);
    if (table->ndim != 2 || B <= 0 || T <= 0) trn_fatal("trn_embedding: table must be (V,C) and B,T > 0 (B=%d T=%d)", B, T);
    trn__weight(m, table, "trn_embedding");
    V = table->shape[0]; C = table->shape[1];
    dev = trn__upload_ids(m, ids, B * T, V, "trn_embedding");
    shape[0] = B; shape[1] = T; shape[2] = C;
    out = trn_tensor_new(m, "embedding", 3, shape);
    m->backend->embedding_forward(out->data, dev, table->data, B * T, C);
    e = trn__record(m, "embedding", trn__embedding_bw, out, table, NULL, NULL);
    if (e) {
        rows_equal = B > 1;
        for (b = 1; b < B && rows_equal; b++) rows_equal = !memcmp(ids + (size_t)b * T, ids, sizeof(int) * (size_t)T);
        e->saved[0] = dev; e->iarg[0] = B * T; e->iarg[1] = C; e->iarg[2] = rows_equal ? B : 0;
    }
    return out;
}

/* --- layernorm ------------------------------------------------------------ */
/* iarg: N, C. Saved: mean (N) and rstd (N), from the arena. */
static void trn__layernorm_fw(trn_model *m, trn_tape_entry *e) {
    trn_tensor *x = e->in[0], *w = e->in[1], *b = e->in[2];
    float *mean = (float *)trn_arena_alloc(m, sizeof(float) * (size_t)e->iarg[0]);
    float *rstd = (float *)trn_arena_alloc(m, sizeof(float) * (size_t)e->iarg[0]);
    m->backend->layernorm_forward(e->out->data, mean, rstd, x->data, w->data, b->data, e->iarg[0], e->iarg[1]);
    e->saved[0] = mean;
    e->saved[1] = rstd;
}
static void trn__layernorm_bw(trn_model *m, trn_tape_entry *e) {
    trn_tensor *x = e->in[0], *w = e->in[1], *b = e->in[2];
    int fresh = 0;
    if (m->backend->layernorm_backward_ex) { /* a fresh dx is written, not zeroed and added to */
        float *dx = trn__want(m, x, &fresh);
        m->backend->layernorm_backward_ex(dx, NULL, trn_grad(m, w), trn_grad(m, b), trn_grad(m, e->out), x->data,
                                          w->data, (const float *)e->saved[0], (const float *)e->saved[1], e->iarg[0],
                                          e->iarg[1], fresh);
        return;
    }
    m->backend->layernorm_backward(trn_grad(m, x), trn_grad(m, w), trn_grad(m, b), trn_grad(m, e->out), x->data, w->data,
                                   (const float *)e->saved[0], (const float *)e->saved[1], e->iarg[0], e->iarg[1]);
}
static const trn_op trn__layernorm_op = {"layernorm", trn__layernorm_fw, trn__layernorm_bw, trn__layernorm_fw,
                                         trn__layernorm_bw, 1};

TRNDEF trn_tensor *trn_layernorm(trn_model *m, trn_tensor *x, trn_tensor *w, trn_tensor *b) {
    int C, N;
    trn_tensor *out;
    trn_op_args args;
    trn__not_null("trn_layernorm", m, x); trn__not_null("trn_layernorm", w, b);
    x = trn__act(m, x); trn__weight(m, w, "trn_layernorm"); trn__weight(m, b, "trn_layernorm");
    C = TRN__LAST(x);
    trn__need(w->size == (size_t)C && b->size == (size_t)C, "trn_layernorm", x, w, "weight and bias must have C elements");
    N = (int)(x->size / (size_t)C);
    out = trn_tensor_new(m, "layernorm", x->ndim, x->shape);
    memset(&args, 0, sizeof args);
    args.i[0] = N; args.i[1] = C;
    trn_op_apply(m, &trn__layernorm_op, out, x, w, b, &args);
    return out;
}

/* --- gelu, relu, add ------------------------------------------------------ */
static void trn__gelu_fw(trn_model *m, trn_tape_entry *e) {   /* saves nothing: backward reads x */
    m->backend->gelu_forward(e->out->data, e->in[0]->data, e->out->size);
}
static void trn__gelu_bw(trn_model *m, trn_tape_entry *e) {
    m->backend->gelu_backward(trn_grad(m, e->in[0]), e->in[0]->data, trn_grad(m, e->out), e->out->size);
}
static const trn_op trn__gelu_op = {"gelu", trn__gelu_fw, trn__gelu_bw, trn__gelu_fw, trn__gelu_bw, 1};
TRNDEF trn_tensor *trn_gelu(trn_model *m, trn_tensor *x) {
    trn_tensor *out;
    trn__not_null("trn_gelu", m, x);
    x = trn__act(m, x);
    out = trn_tensor_new(m, "gelu", x->ndim, x->shape);
    trn_op_apply(m, &trn__gelu_op, out, x, NULL, NULL, NULL);
    return out;
}

/* >>mlp: y = proj(gelu(fc(x))) as two tape entries:
     "linear"       x -> pre (N,H)          trn_linear's backward, unchanged
     "gelu_linear"  pre -> y (N,OC)         saves g = gelu(pre) (N,H)
   Saved for backward: pre and g, as trn_linear + trn_gelu + trn_linear
   keep. What the pairing buys on a device (train_cuda.h in bf16):
     forward   one GEMM writes pre and g: GELU runs in its epilogue, on the
               accumulator still in registers, not as a pass over (N,H);
     backward  the GEMM that makes d(g) = dy W multiplies by gelu'(pre) in
               its epilogue and writes d(pre): d(g) never exists, and GELU's
               backward costs no pass of its own.
   A backend without them runs the plain kernels: the same calls, in the
   same order, as the three separate ops. The CPU has the backward one
   (trn_matmul_dgelu_backward: no (N,H) scratch), the same numbers. */
static void trn__gelu_linear_bw(trn_model *m, trn_tape_entry *e) {
    trn_tensor *pre = e->in[0], *w = e->in[1], *b = e->in[2];
    const float *g = (const float *)e->saved[0], *dy = e->out->grad;
    int N = e->iarg[0], H = e->iarg[1], OC = e->iarg[2], fresh = 0, zw, zb;
    int fused = m->backend->matmul_dgelu_backward != NULL;
    float *dpre, *dg, *dw = trn__want_param(m, w, &zw), *db = trn__want_param(m, b, &zb); /* zero: may be written */
    size_t bytes = (size_t)N * H * trn_dtype_size(m->act_dtype);
    if (!pre->requires_grad) {
        trn__matmul_bw(m, NULL, 0, dw, zw, db, zb, dy, g, w->data, N, H, OC);
        return;
    }
    dpre = trn__grad(m, pre, fused ? &fresh : NULL);
    if (fused && fresh) { /* the fused way writes d(pre): only into a new buffer */
        trn__matmul_bw(m, NULL, 0, dw, zw, db, zb, dy, g, w->data, N, H, OC);
        m->backend->matmul_dgelu_backward(dpre, dy, w->data, pre->data, N, H, OC);
        return;
    }
    /* plain: d(g) = dy W written into a scratch (N,H), then d(pre) += gelu'(pre) d(g) */
    dg = (float *)trn__grads_alloc(m, bytes);
    trn__matmul_bw(m, dg, 1, dw, zw, db, zb, dy, g, w->data, N, H, OC);
    m->backend->gelu_backward(dpre, pre->data, dg, (size_t)N * H);
    trn__grads_free(m, dg);
}
TRNDEF trn_tensor *trn_mlp(trn_model *m, trn_tensor *x, trn_tensor *fc_w, trn_tensor *fc_b, trn_tensor *proj_w,
                           trn_tensor *proj_b) {
    int C, H, OC, N, shape[TRN_MAX_DIMS];
    float *g;
    trn_tensor *pre, *out;
    trn_tape_entry *e;
    trn__not_null("trn_mlp", m, x); trn__not_null("trn_mlp", fc_w, proj_w);
    x = trn__act(m, x);
    trn__weight(m, fc_w, "trn_mlp"); trn__weight(m, fc_b, "trn_mlp");
    trn__weight(m, proj_w, "trn_mlp"); trn__weight(m, proj_b, "trn_mlp");
    C = TRN__LAST(x);
    trn__need(fc_w->ndim == 2 && fc_w->shape[1] == C, "trn_mlp", x, fc_w, "input channels must match fc weight (H,C)");
    H = fc_w->shape[0];
    trn__need(proj_w->ndim == 2 && proj_w->shape[1] == H, "trn_mlp", fc_w, proj_w, "proj weight must be (OC,H)");
    OC = proj_w->shape[0];
    if (fc_b) trn__need(fc_b->size == (size_t)H, "trn_mlp", fc_w, fc_b, "fc bias must have H elements");
    if (proj_b) trn__need(proj_b->size == (size_t)OC, "trn_mlp", proj_w, proj_b, "proj bias must have OC elements");
    N = (int)(x->size / (size_t)C);
    memcpy(shape, x->shape, sizeof shape);
    shape[x->ndim - 1] = H;
    pre = trn_tensor_new(m, "linear", x->ndim, shape);                         /* (N,H) */
    g = (float *)trn_arena_alloc(m, (size_t)N * H * trn_dtype_size(m->act_dtype)); /* (N,H) */
    if (m->backend->matmul_gelu_forward) {
        m->backend->matmul_gelu_forward(g, pre->data, x->data, fc_w->data, fc_b ? fc_b->data : NULL, N, C, H);
    } else {
        m->backend->matmul_forward(pre->data, x->data, fc_w->data, fc_b ? fc_b->data : NULL, N, C, H);
        m->backend->gelu_forward(g, pre->data, (size_t)N * H);
    }
    e = trn__record(m, "linear", trn__linear_bw, pre, x, fc_w, fc_b);
    if (e) { e->iarg[0] = N; e->iarg[1] = C; e->iarg[2] = H; }
    shape[x->ndim - 1] = OC;
    out = trn_tensor_new(m, "gelu_linear", x->ndim, shape);                    /* (N,OC) */
    m->backend->matmul_forward(out->data, g, proj_w->data, proj_b ? proj_b->data : NULL, N, H, OC);
    e = trn__record(m, "gelu_linear", trn__gelu_linear_bw, out, pre, proj_w, proj_b);
    if (e) { e->saved[0] = g; e->iarg[0] = N; e->iarg[1] = H; e->iarg[2] = OC; }
    return out;
}

/* relu is written with the public op API (>>opapi), the way a user writes
   an op: the kit's other ops call trn__record directly, which is the same */
static void trn__relu_fw(trn_model *m, trn_tape_entry *e) {
    m->backend->relu_forward(e->out->data, e->in[0]->data, e->out->size);
}
static void trn__relu_bw(trn_model *m, trn_tape_entry *e) {   /* saves nothing: reads out */
    m->backend->relu_backward(trn_grad(m, e->in[0]), e->out->data, trn_grad(m, e->out), e->out->size);
}
/* the backend table picks the kernel, so one function serves both places */
static const trn_op trn__relu_op = {"relu", trn__relu_fw, trn__relu_bw, trn__relu_fw, trn__relu_bw, 1};
TRNDEF trn_tensor *trn_relu(trn_model *m, trn_tensor *x) {
    trn_tensor *out;
    trn__not_null("trn_relu", m, x);
    x = trn__act(m, x);
    out = trn_tensor_new(m, "relu", x->ndim, x->shape);
    trn_op_apply(m, &trn__relu_op, out, x, NULL, NULL, NULL);
    return out;
}

/* d(a+b)/da = d(a+b)/db = 1: d(a) += d(out), d(b) += d(out). d(out) is
   read here for the last time (trn_backward frees it after), so an input
   with no gradient yet (the residual stream's usual case) takes that
   buffer itself, no copy; the other gets a copy, or adds it to what it
   has. */
static void trn__add_bw(trn_model *m, trn_tape_entry *e) {
    trn_tensor *out = e->out;
    int k, taken = -1;
    for (k = 0; k < 2 && taken < 0; k++) {
        trn_tensor *x = e->in[k];
        if (x->requires_grad && !x->grad && !x->is_param && trn__grad_dtype(x) == out->dtype && x != e->in[1 - k]) {
            x->grad = out->grad; /* (a span of the gradient block: freed with x's producer) */
            out->grad = NULL;
            taken = k;
        }
    }
    for (k = 0; k < 2; k++) {
        float *g, *dout = taken >= 0 ? e->in[taken]->grad : out->grad;
        int fresh;
        if (k == 1 && e->iarg[0]) continue; /* b's gradient was written by trn_add_layernorm's backward */
        if (k == taken || !(g = trn__want(m, e->in[k], &fresh))) continue;
        if (fresh) m->backend->copy(g, dout, e->in[k]->size * trn_dtype_size(trn__grad_dtype(e->in[k])));
        else m->backend->accumulate(g, dout, e->in[k]->size);
    }
}
TRNDEF trn_tensor *trn_add(trn_model *m, trn_tensor *a, trn_tensor *b) {
    trn_tensor *out;
    trn__not_null("trn_add", a, b);
    a = trn__act(m, a); b = trn__act(m, b);
    trn__need(a->ndim == b->ndim && memcmp(a->shape, b->shape, sizeof(int) * (size_t)a->ndim) == 0, "trn_add", a, b,
              "shapes must be equal");
    out = trn_tensor_new(m, "add", a->ndim, a->shape);
    m->backend->add_forward(out->data, a->data, b->data, a->size);
    trn__record(m, "add", trn__add_bw, out, a, b, NULL);
    return out;
}

/* In place: the output's memory is b's, so the arena keeps one (B,T,C)
   fewer per call; a GPT-2 block keeps 16 of its 18 per token. Safe when no
   backward reads b's values: not its producer's (the ops whose backward
   reads only their inputs are allowed), not any op's that took b as an
   input (none may have). */
static void trn__add_layernorm_bw(trn_model *m, trn_tape_entry *e);
static trn_tensor *trn__add_inplace(trn_model *m, trn_tensor *a, trn_tensor *b, int run) {
    trn_tensor *out;
    int i, k;
    trn__not_null("trn_add_inplace", a, b);
    a = trn__act(m, a);
    trn__need(a->ndim == b->ndim && memcmp(a->shape, b->shape, sizeof(int) * (size_t)a->ndim) == 0, "trn_add_inplace",
              a, b, "shapes must be equal");
    if (b->is_param || b->dtype != m->act_dtype || b == a)
        trn_fatal("trn_add_inplace: b (%s) must be an activation of the model's dtype, other than a: its memory "
                  "takes the sum", b->name);
    for (i = 0; i < m->tape_len; i++) {
        const trn_tape_entry *e = &m->tape[i];
        for (k = 0; k < 3; k++)
            if (e->in[k] == b) trn_fatal("trn_add_inplace: %s was already used by %s, whose backward may read it", b->name, e->op);
        if (e->out == b && e->backward != trn__linear_bw && e->backward != trn__layernorm_bw &&
            e->backward != trn__add_layernorm_bw &&
            e->backward != trn__gelu_bw && e->backward != trn__embedding_bw && e->backward != trn__add_bw &&
            e->backward != trn__gelu_linear_bw)
            trn_fatal("trn_add_inplace: %s comes from %s, whose backward reads its output: use trn_add", b->name, e->op);
    }
    out = trn__header(m);
    trn__fill_header(out, "add", b->ndim, b->shape);
    out->dtype = b->dtype;
    out->data = b->data;
    if (run) m->backend->add_forward(out->data, a->data, b->data, a->size); /* elementwise: out may be b */
    trn__record(m, "add", trn__add_bw, out, a, b, NULL);
    return out;
}
TRNDEF trn_tensor *trn_add_inplace(trn_model *m, trn_tensor *a, trn_tensor *b) { return trn__add_inplace(m, a, b, 1); }

/* >>addln: the tape holds the two ops as two entries, "add" (sum = a + b)
   then "layernorm" (of sum), recorded one after the other; only the
   kernels are fused. Backward reaches the layernorm first: when sum's
   gradient is complete (every later use of the residual stream has run),
   its pass adds the layernorm's part into it and also WRITES it into b's
   fresh gradient; the flag iarg[0] on the add entry tells trn__add_bw
   that b has it (a then takes sum's buffer, no copy). iarg: N, C, 1 when
   the add entry precedes. Saved: mean, rstd. */
static void trn__add_layernorm_bw(trn_model *m, trn_tape_entry *e) {
    trn_tensor *s = e->in[0], *w = e->in[1], *bias = e->in[2], *b = NULL;
    trn_tape_entry *add = e->iarg[2] ? e - 1 : NULL; /* (no recompute runs in between: the tape has not moved) */
    float *ds = trn_grad(m, s), *db2 = NULL;
    if (add && add->out == s && add->backward == trn__add_bw) b = add->in[1];
    if (ds && b && b->requires_grad && !b->grad && b != add->in[0] && trn__grad_dtype(b) == trn__grad_dtype(s)) {
        int fresh;
        db2 = trn__grad(m, b, &fresh); /* fresh: written below */
        add->iarg[0] = 1;
    }
    m->backend->layernorm_backward_ex(ds, db2, trn_grad(m, w), trn_grad(m, bias), trn_grad(m, e->out), s->data, w->data,
                                      (const float *)e->saved[0], (const float *)e->saved[1], e->iarg[0], e->iarg[1], 0);
}
TRNDEF trn_tensor *trn_add_layernorm(trn_model *m, trn_tensor *a, trn_tensor *b, trn_tensor *w, trn_tensor *bias,
                                     trn_tensor **sum) {
    const trn_backend *bk;
    trn_tensor *s, *out;
    trn_tape_entry *e;
    float *mean, *rstd;
    int C, N, n_tape;
    if (!m || !sum) trn_fatal("trn_add_layernorm: model or sum is NULL");
    bk = m->backend;
    if (!bk->add_layernorm_forward || !bk->layernorm_backward_ex) { /* the unfused ops, the same math */
        *sum = trn_add_inplace(m, a, b);
        return trn_layernorm(m, *sum, w, bias);
    }
    trn__not_null("trn_add_layernorm", w, bias);
    trn__weight(m, w, "trn_add_layernorm"); trn__weight(m, bias, "trn_add_layernorm");
    a = trn__act(m, a); /* (a cast recorded first, if a needs one) */
    n_tape = m->tape_len;
    s = trn__add_inplace(m, a, b, 0); /* checked and recorded; its values come from the fused kernel below */
    C = TRN__LAST(s);
    trn__need(w->size == (size_t)C && bias->size == (size_t)C, "trn_add_layernorm", s, w,
              "weight and bias must have C elements");
    N = (int)(s->size / (size_t)C);
    out = trn_tensor_new(m, "layernorm", s->ndim, s->shape);
    mean = (float *)trn_arena_alloc(m, sizeof(float) * (size_t)N);
    rstd = (float *)trn_arena_alloc(m, sizeof(float) * (size_t)N);
    bk->add_layernorm_forward(s->data, out->data, mean, rstd, a->data, s->data, w->data, bias->data, N, C);
    e = trn__record(m, "layernorm", trn__add_layernorm_bw, out, s, w, bias);
    if (e) {
        e->saved[0] = mean; e->saved[1] = rstd;
        e->iarg[0] = N; e->iarg[1] = C;
        e->iarg[2] = m->tape_len == n_tape + 2; /* the add was recorded just before */
    }
    *sum = s;
    return out;
}

/* --- attention: the fused kernel pair; saved: lse (B,NH,T) and the output
   itself (backward reads O for D = rowsum(dO * O)) ------------------------ */
static void trn__attention_bw(trn_model *m, trn_tape_entry *e) {
    int B = e->iarg[0], T = e->iarg[1], NH = e->iarg[2], NKV = e->iarg[3], fresh = 0;
    int hs = e->in[0]->shape[2] / (NH + 2 * NKV);
    const trn_backend *bk = m->backend;
    /* a fresh dqkv (its first gradient) is written, not zeroed and added to, where the backend can */
    float *dqkv = trn__grad(m, e->in[0], bk->flash_attention_backward_ex ? &fresh : NULL);
    if (bk->flash_attention_backward_ex)
        bk->flash_attention_backward_ex(dqkv, e->out->grad, e->in[0]->data, e->out->data, (const float *)e->saved[0],
                                        B, T, NH, NKV, hs, (int)e->farg[0], fresh);
    else
        bk->flash_attention_backward(dqkv, e->out->grad, e->in[0]->data, e->out->data, (const float *)e->saved[0], B,
                                     T, NH, NKV, hs, (int)e->farg[0]);
}
/* m->attention_materialized: the reference pair; saved: att (B,NH,T,T).
   Its backward workspace (B,NH,T,T) lives in the gradient block only while
   this backward runs, so one serves every layer. */
static void trn__attention_ref_bw(trn_model *m, trn_tape_entry *e) {
    int B = e->iarg[0], T = e->iarg[1], NH = e->iarg[2], NKV = e->iarg[3];
    int hs = e->in[0]->shape[2] / (NH + 2 * NKV);
    float *dqkv = trn__grad(m, e->in[0], NULL);
    float *scratch = (float *)trn__grads_alloc(m, trn_dtype_size(m->act_dtype) * (size_t)B * NH * T * T);
    m->backend->attention_backward(dqkv, scratch, e->out->grad, e->in[0]->data, (const float *)e->saved[0],
                                   B, T, NH, NKV, hs, (int)e->farg[0]);
    trn__grads_free(m, scratch);
}

static trn_tensor *trn__attention(trn_model *m, const char *op, trn_tensor *qkv, int n_head, int n_kv_head,
                                  int causal) {
    int B, T, hs, shape[3];
    float *lse;
    trn_tensor *out;
    trn_tape_entry *e;
    trn__not_null(op, m, qkv);
    qkv = trn__act(m, qkv);
    if (qkv->ndim != 3 || n_head <= 0 || n_kv_head <= 0 || n_head % n_kv_head ||
        qkv->shape[2] % (n_head + 2 * n_kv_head) || qkv->shape[2] == 0) {
        char s[64];
        trn_fatal("%s: qkv must be (B,T,(n_head+2*n_kv_head)*hs) with n_kv_head dividing n_head; "
                  "got %s with n_head=%d, n_kv_head=%d", op, trn_shape_str(qkv, s, 64), n_head, n_kv_head);
    }
    B = qkv->shape[0]; T = qkv->shape[1]; hs = qkv->shape[2] / (n_head + 2 * n_kv_head);
    shape[0] = B; shape[1] = T; shape[2] = n_head * hs;
    out = trn_tensor_new(m, "attention", 3, shape);
    if (m->attention_materialized) { /* saved: the probabilities, (B,NH,T,T) */
        lse = (float *)trn_arena_alloc(m, trn_dtype_size(m->act_dtype) * (size_t)B * n_head * T * T);
        m->backend->attention_forward(out->data, lse, qkv->data, B, T, n_head, n_kv_head, hs, causal);
        e = trn__record(m, "attention", trn__attention_ref_bw, out, qkv, NULL, NULL);
    } else { /* saved: one log-sum-exp per row, (B,NH,T) */
        lse = (float *)trn_arena_alloc(m, sizeof(float) * (size_t)B * n_head * T);
        m->backend->flash_attention_forward(out->data, lse, qkv->data, B, T, n_head, n_kv_head, hs, causal);
        e = trn__record(m, "attention", trn__attention_bw, out, qkv, NULL, NULL);
    }
    if (e) {
        e->saved[0] = lse;
        e->iarg[0] = B; e->iarg[1] = T; e->iarg[2] = n_head; e->iarg[3] = n_kv_head;
        e->farg[0] = (float)(causal != 0);
    }
    return out;
}

TRNDEF trn_tensor *trn_attention_gqa(trn_model *m, trn_tensor *qkv, int n_head, int n_kv_head,
                                     int causal) {
    return trn__attention(m, "trn_attention_gqa", qkv, n_head, n_kv_head, causal);
}

TRNDEF trn_tensor *trn_attention(trn_model *m, trn_tensor *qkv, int n_head, int causal) {
    return trn__attention(m, "trn_attention", qkv, n_head, n_head, causal);
}

/* --- losses: a scalar tensor holding the mean over rows -------------------- */
/* out[0] = (sum of the n terms, in double, on the host) / count; 0 when
   count is 0. The terms come to the host in chunks through a stack buffer:
   no allocation, so a step's ledger does not move */
static void trn__mean_into(trn_model *m, trn_tensor *out, const float *terms, size_t n, double count) {
    float host[1024], mean;
    double sum = 0.0;
    size_t i, lo, k;
    for (lo = 0; lo < n; lo += k) {
        k = TRN__MIN(n - lo, sizeof host / sizeof host[0]);
        m->backend->download(host, terms + lo, sizeof(float) * k);
        for (i = 0; i < k; i++) sum += host[i];
    }
    mean = count > 0.0 ? (float)(sum / count) : 0.0f;
    m->backend->upload(out->data, &mean, sizeof mean);
}
static trn_tensor *trn__scalar_mean(trn_model *m, const char *name, const float *losses, size_t n) {
    int one = 1;
    trn_tensor *out = trn_tensor_new_dtype(m, name, 1, &one, TRN_F32); /* a loss is fp32 */
    if (m->backend->mean) { /* where the losses are: no round trip */
        m->backend->mean(out->data, losses, n);
        return out;
    }
    trn__mean_into(m, out, losses, n, (double)n);
    return out;
}

/* the gradient of a scalar output: the loss trn_backward started from has
   gradient 1 (no download, no host wait); any other is read back */
static float trn__scalar_grad(trn_model *m, const trn_tensor *t) {
    float g;
    if (t == m->sync_free.grad_one) return m->sync_free.grad_one_value;
    m->backend->download(&g, t->grad, sizeof g);
    return g;
}

static void trn__xent_bw(trn_model *m, trn_tape_entry *e) {
    int N = e->iarg[0];
    float dloss = trn__scalar_grad(m, e->out);
    m->backend->crossentropy_backward(trn__grad(m, e->in[0], NULL), e->in[0]->data, (const float *)e->saved[0],
                                      (const int *)e->saved[1], dloss / (float)N, N, e->iarg[1], e->iarg[2]);
}

TRNDEF trn_tensor *trn_cross_entropy(trn_model *m, trn_tensor *logits, const int *targets, int n_valid) {
    int N, Vp, *dev;
    float *losses, *lse;
    trn_tensor *out;
    trn_tape_entry *e;
    trn__not_null("trn_cross_entropy", m, logits); trn__not_null("trn_cross_entropy", targets, targets);
    logits = trn__act(m, logits);
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

/* --- linear + cross-entropy, fused: the classifier -------------------------
   loss = mean over rows n of CE(x[n] W^T + b, target[n]), x (N,C) (any
   leading dims), W (Vp,C), b (Vp) or NULL, targets in [0,n_valid).
   Unfused (trn_linear then trn_cross_entropy) the logits (N,Vp) and their
   gradient (N,Vp) both exist until the end of backward: 2*N*Vp floats,
   824 MB for GPT-2 at B=2, T=1024. Fused, forward already computes the
   gradient for d(loss) = 1 (what trn_backward seeds), and keeps the
   smaller of two things:
   "chunks" (many rows, N > ~C): the rows go through R at a time,
       logits (R,Vp) = x_chunk W^T + b               (scratch)
       losses, dlogits = cross-entropy of the chunk, its gradient
                         (softmax - onehot) / N WRITTEN OVER the logits
                         (the backend's crossentropy_fused: one pass)
       dx_chunk      = dlogits W                     (saved, (N,C) in all)
       dW += dlogits^T x_chunk, db += column sums    (saved, (Vp,C), (Vp))
     (the first chunk WRITES dW: no zero pass), and backward only scales
     the saved dx, dW, db by the incoming d(loss) (1 unless the loss was
     scaled) and adds them in. Memory: N*C + Vp*C floats + R*Vp of
     scratch, instead of 2*N*Vp.
   "dlogits" (few rows): keep dlogits (N,Vp) alone (the llm.c way: the
     logits are gone, their gradient stands in their place), and backward
     runs the linear layer's backward on it, exactly as unfused: N*Vp
     floats, and no extra pass over a (Vp,C) dW when W is large.
   R: the backend's xent_chunk_bytes of logits, or TRN__XENT_CHUNK_FLOATS
   floats (the CPU), split evenly over the chunks. The dW GEMM reads and
   writes all of the fp32 (Vp,C) dW once per chunk, so chunks must be
   large where that costs (GPT-2 124M in bf16 on the CUDA backend: 4
   chunks of 4096 rows at B=16, T=1024; 166-row chunks made it 99 chunks
   and ~30 GB of dW traffic per step).
   The FLOPs are the unfused pair's either way. What is saved sits in the
   gradient arena and dies in this op's backward, the first of the step, so
   the gradients of the layers below reuse its bytes (dx, when x has no
   gradient yet and d(loss) is 1, becomes x's gradient as it is: no copy). With the tape off
   (evaluation) only the losses are computed, chunk by chunk. Same backend
   kernels as the unfused pair: matmul, cross-entropy, scale, add; without
   crossentropy_fused, a second (R,Vp) buffer for dlogits and a zero pass. */
/* the classifier's launches, told apart in the time ledger (train_cuda.h) */
#define TRN__SITE_SCOPE(bk, name) do { if ((bk)->site_scope) (bk)->site_scope(name); } while (0)
#ifndef TRN__XENT_CHUNK_FLOATS /* (tests set it small to get many chunks, on every backend) */
#define TRN__XENT_CHUNK_FLOATS ((size_t)1 << 23) /* 32 MB of logits per chunk */
#define TRN__XENT_CHUNK_SET 0
#else
#define TRN__XENT_CHUNK_SET 1 /* a test's size wins over the backend's xent_chunk_bytes */
#endif

static void trn__linear_xent_bw(trn_model *m, trn_tape_entry *e) {
    trn_tensor *x = e->in[0], *w = e->in[1], *b = e->in[2];
    float dloss;
    int k, fresh;
    dloss = trn__scalar_grad(m, e->out); /* no download when it is the loss */
    TRN__SITE_SCOPE(m->backend, "classifier");
    if (e->iarg[0]) { /* "dlogits": the linear layer's backward, as unfused */
        int N = e->iarg[1], C = e->iarg[2], Vp = e->iarg[3];
        float *dl = (float *)e->saved[0], *dx;
        if (dloss != 1.0f) m->backend->convert(dl, m->act_dtype, dl, m->act_dtype, (size_t)N * Vp, 0, dloss);
        dx = trn__want(m, x, &fresh);
        trn__matmul_bw(m, dx, fresh, trn__want(m, w, NULL), 0, trn__want(m, b, NULL), 0, dl, x->data, w->data, N,
                       C, Vp);
        trn__grads_free(m, dl);
        TRN__SITE_SCOPE(m->backend, NULL);
        return;
    }
    for (k = 0; k < 3; k++) { /* "chunks": dx, dW, db (NULL: no gradient wanted) */
        trn_tensor *t = e->in[k];
        float *saved = (float *)e->saved[k], *g;
        int dt;
        if (!saved) continue;
        dt = trn__grad_dtype(t); /* saved in the gradient's dtype */
        if (!t->is_param && !t->grad && dloss == 1.0f) { /* dx: x takes the saved buffer itself, no copy */
            t->grad = saved; /* (a span of the gradient block, x->size elements: freed with x's producer) */
            continue;
        }
        if (t->is_param) { /* dW, db: written when known zero (no read of the old fp32 values) */
            int z;
            g = trn__want_param(m, t, &z);
            fresh = z != 0;
        } else g = trn__grad(m, t, &fresh);
        if (m->act_dtype != TRN_F32) /* bf16: dx is bf16, dW and db fp32; accumulate is bf16-only */
            m->backend->convert(g, dt, saved, dt, t->size, !fresh, dloss);
        else {
            if (dloss != 1.0f) m->backend->scale(saved, dloss, t->size);
            if (fresh) m->backend->copy(g, saved, t->size * sizeof(float));
            else m->backend->accumulate(g, saved, t->size);
        }
        trn__grads_free(m, saved);
    }
    TRN__SITE_SCOPE(m->backend, NULL);
}

TRNDEF trn_tensor *trn_linear_cross_entropy(trn_model *m, trn_tensor *x, trn_tensor *w, trn_tensor *b,
                                            const int *targets, int n_valid) {
    int C, Vp, N, R, nchunk, r0, *dev, want, keep_dlogits, fused;
    size_t A = trn_dtype_size(m ? m->act_dtype : TRN_F32); /* bytes per logit, dlogit, dx element */
    double nbuf;
    float *losses, *lse, *logits, *dlogits = NULL, *dx = NULL, *dw = NULL, *db = NULL;
    trn_tensor *out;
    trn_tape_entry *e;
    const trn_backend *bk;
    trn__not_null("trn_linear_cross_entropy", m, x); trn__not_null("trn_linear_cross_entropy", w, targets);
    x = trn__act(m, x); trn__weight(m, w, "trn_linear_cross_entropy"); trn__weight(m, b, "trn_linear_cross_entropy");
    bk = m->backend;
    C = TRN__LAST(x);
    trn__need(w->ndim == 2 && w->shape[1] == C, "trn_linear_cross_entropy", x, w, "input channels must match weight (Vp,C)");
    Vp = w->shape[0];
    if (b) trn__need(b->size == (size_t)Vp, "trn_linear_cross_entropy", w, b, "bias must have Vp elements");
    if (n_valid <= 0 || n_valid > Vp) trn_fatal("trn_linear_cross_entropy: n_valid=%d must be in [1,%d]", n_valid, Vp);
    N = (int)(x->size / (size_t)C);
    fused = bk->crossentropy_fused != NULL;
    nbuf = fused ? 1.0 : 2.0; /* (R,Vp) buffers: logits, and dlogits unless they overwrite the logits */
    if (bk->xent_chunk_bytes && !TRN__XENT_CHUNK_SET) R = (int)TRN__MIN((size_t)N, TRN__MAX((size_t)1, bk->xent_chunk_bytes / (A * (size_t)Vp)));
    else R = (int)TRN__MIN((size_t)N, TRN__MAX((size_t)1, TRN__XENT_CHUNK_FLOATS / (size_t)Vp));
    if (R < 1) R = 1; /* (N = 0) */
    nchunk = (N + R - 1) / R;
    if (nchunk > 1) R = (N + nchunk - 1) / nchunk; /* equal chunks: 16384 rows at most 4169 -> 4 x 4096 */
    TRN__SITE_SCOPE(bk, "classifier");
    dev = trn__upload_ids(m, targets, N, n_valid, "trn_linear_cross_entropy (targets)");
    losses = (float *)trn_arena_alloc(m, sizeof(float) * (size_t)N);
    want = m->grad_enabled && (x->requires_grad || w->requires_grad || (b && b->requires_grad));
    /* the cheaper of the two in bytes, counting the most either holds at once */
    keep_dlogits = want && nbuf * A * N * Vp <= (double)A * N * C + 4.0 * Vp * C + nbuf * A * R * Vp;
    if (keep_dlogits) R = N; /* one chunk: all rows */
    if (want && !keep_dlogits) { /* the saved gradients, over the chunks */
        if (x->requires_grad) dx = (float *)trn__grads_alloc(m, x->size * A);
        if (w->requires_grad) dw = (float *)trn__grads_alloc(m, w->size * sizeof(float)); /* chunk 0 writes it */
        if (b && b->requires_grad) db = (float *)trn__grads_alloc(m, b->size * sizeof(float));
        if (db) bk->zero(db, b->size * sizeof(float)); /* column sums add */
    }
    logits = (float *)trn__grads_alloc(m, A * (size_t)R * Vp);
    if (want && !fused) dlogits = (float *)trn__grads_alloc(m, A * (size_t)R * Vp);
    lse = (float *)trn__grads_alloc(m, sizeof(float) * (size_t)R);
    for (r0 = 0; r0 < N; r0 += R) {
        int n = TRN__MIN(R, N - r0);
        const float *xc = (const float *)((const char *)x->data + (size_t)r0 * C * A);
        float *dxc = dx ? (float *)((char *)dx + (size_t)r0 * C * A) : NULL, *dl;
        bk->matmul_forward(logits, xc, w->data, b ? b->data : NULL, n, C, Vp);          /* (n,Vp) */
        if (!want) { bk->crossentropy_forward(losses + r0, lse, logits, dev + r0, n, n_valid, Vp); continue; }
        if (fused) {
            bk->crossentropy_fused(losses + r0, logits, dev + r0, 1.0f / (float)N, n, n_valid, Vp);
            dl = logits;
        } else {
            bk->crossentropy_forward(losses + r0, lse, logits, dev + r0, n, n_valid, Vp);
            bk->zero(dlogits, A * (size_t)n * Vp); /* the kernel adds; padding stays 0 */
            bk->crossentropy_backward(dlogits, logits, lse, dev + r0, 1.0f / (float)N, n, n_valid, Vp);
            dl = dlogits;
        }
        if (keep_dlogits) { dlogits = dl; continue; }
        trn__matmul_bw(m, dxc, 1, dw, r0 == 0, db, 0, dl, xc, w->data, n, C, Vp); /* dx rows written, dW from chunk 1 on added */
    }
    TRN__SITE_SCOPE(bk, NULL);
    trn__grads_free(m, lse);
    if (!(keep_dlogits && dlogits == logits)) trn__grads_free(m, logits);
    if (!keep_dlogits) { trn__grads_free(m, dlogits); dlogits = NULL; }
    out = trn__scalar_mean(m, "linear_cross_entropy", losses, (size_t)N);
    e = want ? trn__record(m, "linear_cross_entropy", trn__linear_xent_bw, out, x, w, b) : NULL;
    if (e && keep_dlogits) { e->saved[0] = dlogits; e->iarg[0] = 1; e->iarg[1] = N; e->iarg[2] = C; e->iarg[3] = Vp; }
    else if (e) { e->saved[0] = dx; e->saved[1] = dw; e->saved[2] = db; }
    else { trn__grads_free(m, dlogits); trn__grads_free(m, dx); trn__grads_free(m, dw); trn__grads_free(m, db); }
    return out;
}

static void trn__mse_bw(trn_model *m, trn_tape_entry *e) {
    trn_tensor *p = e->in[0];
    float dloss = trn__scalar_grad(m, e->out);
    m->backend->mse_backward(trn__grad(m, p, NULL), p->data, (const float *)e->saved[0], dloss / (float)p->size, p->size);
}

TRNDEF trn_tensor *trn_mse(trn_model *m, trn_tensor *pred, const float *target) {
    float *tdev, *losses;
    trn_tensor *out;
    trn_tape_entry *e;
    trn__not_null("trn_mse", m, pred);
    if (!target) trn_fatal("trn_mse: target is NULL (host floats, one per element of %s)", pred->name);
    if (pred->is_param) trn__need_alloc(m, "trn_mse", pred->name);
    pred = trn__act(m, pred);
    tdev = trn_input(m, "target", pred->ndim, pred->shape, target)->data; /* in pred's dtype */
    losses = (float *)trn_arena_alloc(m, sizeof(float) * pred->size);
    m->backend->mse_forward(losses, pred->data, tdev, pred->size);
    out = trn__scalar_mean(m, "mse", losses, pred->size);
    e = trn__record(m, "mse", trn__mse_bw, out, pred, NULL, NULL);
    if (e) e->saved[0] = tdev;
    return out;
}

/* --- recompute regions (activation checkpointing) ---------------------------
   Forward runs the region once with the tape on (to learn whether its
   output needs a gradient), then forgets it (with the tape off, as in
   evaluation, it forgets it just the same): the tape is cut back, the
   arena rewound to where the region began, and only the output is kept
   (copied out through the gradient arena and back into a fresh tensor).
   The tape gets one entry, "recompute", whose backward
     1. rewinds m->rng to its state at region entry and re-runs fn(x): the
        region's activations and tape entries exist again, bit for bit;
     2. hands the region output's gradient to the re-run output;
     3. runs backward over the re-run's entries (which frees their
        gradients one by one and leaves x's gradient for x's producer);
     4. cuts the tape and rewinds the arena again.
   Memory: a region keeps its input and output; inside, the largest
   region's activations exist once, during its backward. */
typedef struct trn__arena_mark {
    size_t used, spilled;
    int n_spill, t_used, tape_len;
} trn__arena_mark;

static trn__arena_mark trn__mark(const trn_model *m) {
    trn__arena_mark k;
    k.used = m->arena.used; k.spilled = m->arena.spilled; k.n_spill = m->arena.n_spill;
    k.t_used = m->t_used; k.tape_len = m->tape_len;
    return k;
}

/* forget every activation, tensor header and tape entry made after k */
static void trn__rewind(trn_model *m, const trn__arena_mark *k) {
    trn_arena *a = &m->arena;
    while (a->n_spill > k->n_spill) m->backend->free(a->spill[--a->n_spill]);
    a->used = k->used; a->spilled = k->spilled;
    m->t_used = k->t_used; m->tape_len = k->tape_len;
}

static void trn__recompute_bw(trn_model *m, trn_tape_entry *e) {
    trn_region r = m->regions[e->iarg[0]]; /* copies: the tape and the region table may move */
    trn_tensor *x = e->in[0], *y = e->out, *inner;
    trn__arena_mark k = trn__mark(m);
    uint64_t rng_now = m->rng.state;
    int grad_was = m->grad_enabled;
    m->rng.state = r.rng_state; /* dropout draws the same masks again */
    m->grad_enabled = 1;
    inner = r.fn(m, x, r.user);
    m->rng.state = rng_now;
    m->grad_enabled = grad_was;
    if (inner->size != y->size) trn_fatal("trn_recompute: the region's output changed size on the re-run");
    if (!inner->grad) { /* the usual case: the gradient buffer changes hands */
        inner->grad = y->grad;
        y->grad = NULL;
    } else { /* the region returned its input (or a leaf with a gradient) */
        m->backend->accumulate(inner->grad, y->grad, y->size);
    }
    trn__backward_range(m, m->tape_len - 1, k.tape_len, 0);
    trn__rewind(m, &k);
}

TRNDEF trn_tensor *trn_recompute(trn_model *m, trn_region_fn fn, void *user, trn_tensor *x) {
    trn__arena_mark k;
    trn_tensor *inner, *y;
    trn_tape_entry *e;
    trn_region r;
    int ndim, shape[TRN_MAX_DIMS], rg;
    char name[64];
    void *keep;
    trn__not_null("trn_recompute", m, x);
    if (!fn) trn_fatal("trn_recompute: fn is NULL");
    /* ZeRO-2 and FSDP act per tape entry in backward (train_nccl.h's
       pre-hook), and a region's inner entries are not on the tape */
    if (m->grad_enabled && (m->shard.backward_pre_hook || m->shard.grad_hi || m->shard.param_hi))
        trn_fatal("trn_recompute: not supported with ZeRO-2 or FSDP sharding (use --shard none or zero1)");
    r.fn = fn; r.user = user; r.rng_state = m->rng.state;
    k = trn__mark(m);
    inner = fn(m, x, user);
    if (!inner) trn_fatal("trn_recompute: the region returned NULL");
    rg = inner->requires_grad;
    ndim = inner->ndim;
    memcpy(shape, inner->shape, sizeof shape);
    memcpy(name, inner->name, sizeof name);
    keep = trn__grads_alloc(m, inner->size * trn_dtype_size(inner->dtype));
    m->backend->copy(keep, inner->data, inner->size * trn_dtype_size(inner->dtype));
    trn__rewind(m, &k);
    y = trn_tensor_new_dtype(m, name, ndim, shape, inner->dtype);
    m->backend->copy(y->data, keep, y->size * trn_dtype_size(y->dtype));
    trn__grads_free(m, keep);
    if (!rg || !m->grad_enabled) return y;
    if (m->n_regions == m->cap_regions) {
        int cap = m->cap_regions ? 2 * m->cap_regions : 64;
        trn_region *nr = (trn_region *)realloc(m->regions, sizeof(trn_region) * (size_t)cap);
        if (!nr) trn_fatal("trn_recompute: out of host memory for the region table");
        m->regions = nr;
        m->cap_regions = cap;
    }
    y->requires_grad = 1; /* the region's parameters need it, whatever x does */
    e = trn__record(m, "recompute", trn__recompute_bw, y, x, NULL, NULL);
    if (e) { e->iarg[0] = m->n_regions; m->regions[m->n_regions++] = r; }
    return y;
}

/* --- mean pool -------------------------------------------------------------- */
static void trn__meanpool_bw(trn_model *m, trn_tape_entry *e) {
    trn_tensor *x = e->in[0];
    m->backend->meanpool_backward(trn__grad(m, x, NULL), e->out->grad, x->shape[0], x->shape[1], x->shape[2]);
}
TRNDEF trn_tensor *trn_mean_pool(trn_model *m, trn_tensor *x) {
    int shape[2];
    trn_tensor *out;
    trn__not_null("trn_mean_pool", m, x);
    x = trn__act(m, x);
    if (x->ndim != 3) { char s[64]; trn_fatal("trn_mean_pool: input must be (B,T,C), got %s", trn_shape_str(x, s, 64)); }
    shape[0] = x->shape[0]; shape[1] = x->shape[2];
    out = trn_tensor_new(m, "mean_pool", 2, shape);
    m->backend->meanpool_forward(out->data, x->data, x->shape[0], x->shape[1], x->shape[2]);
    trn__record(m, "mean_pool", trn__meanpool_bw, out, x, NULL, NULL);
    return out;
}

/* --- >>ops2 on the tape: each written with the public op API (>>opapi);
   the backend table picks CPU or CUDA kernels, so one trn_op serves both */
#define TRN__OP2(name, fw, bw) {name, fw, bw, fw, bw, 1}

static void trn__mul_fw(trn_model *m, trn_tape_entry *e) {   /* saves nothing: reads a and b */
    trn_tensor *a = e->in[0], *b = e->in[1];
    m->backend->mul_forward(e->out->data, a->data, b->data, a->size / b->size, b->size);
}
static void trn__mul_bw(trn_model *m, trn_tape_entry *e) {
    trn_tensor *a = e->in[0], *b = e->in[1];
    m->backend->mul_backward(trn_grad(m, a), trn_grad(m, b), trn_grad(m, e->out), a->data, b->data,
                             a->size / b->size, b->size);
}
static const trn_op trn__mul_op = TRN__OP2("mul", trn__mul_fw, trn__mul_bw);
TRNDEF trn_tensor *trn_mul(trn_model *m, trn_tensor *a, trn_tensor *b) {
    trn_tensor *out;
    int k, ok;
    trn__not_null("trn_mul", a, b);
    a = trn__act(m, a); b = trn__act(m, b);
    ok = b->ndim <= a->ndim;   /* b's shape must be a's last b->ndim dims */
    for (k = 0; ok && k < b->ndim; k++) ok = b->shape[k] == a->shape[a->ndim - b->ndim + k];
    trn__need(ok, "trn_mul", a, b, "b must have a's shape or its last dims (one row, broadcast over rows)");
    out = trn_tensor_new(m, "mul", a->ndim, a->shape);
    trn_op_apply(m, &trn__mul_op, out, a, b, NULL, NULL);
    return out;
}

static void trn__silu_fw(trn_model *m, trn_tape_entry *e) {   /* saves nothing: reads x */
    m->backend->silu_forward(e->out->data, e->in[0]->data, e->out->size);
}
static void trn__silu_bw(trn_model *m, trn_tape_entry *e) {
    m->backend->silu_backward(trn_grad(m, e->in[0]), e->in[0]->data, trn_grad(m, e->out), e->out->size);
}
static void trn__sigmoid_fw(trn_model *m, trn_tape_entry *e) {   /* backward reads the output */
    m->backend->sigmoid_forward(e->out->data, e->in[0]->data, e->out->size);
}
static void trn__sigmoid_bw(trn_model *m, trn_tape_entry *e) {
    m->backend->sigmoid_backward(trn_grad(m, e->in[0]), e->out->data, trn_grad(m, e->out), e->out->size);
}
static void trn__tanh_fw(trn_model *m, trn_tape_entry *e) {   /* backward reads the output */
    m->backend->tanh_forward(e->out->data, e->in[0]->data, e->out->size);
}
static void trn__tanh_bw(trn_model *m, trn_tape_entry *e) {
    m->backend->tanh_backward(trn_grad(m, e->in[0]), e->out->data, trn_grad(m, e->out), e->out->size);
}
static const trn_op trn__silu_op = TRN__OP2("silu", trn__silu_fw, trn__silu_bw);
static const trn_op trn__sigmoid_op = TRN__OP2("sigmoid", trn__sigmoid_fw, trn__sigmoid_bw);
static const trn_op trn__tanh_op = TRN__OP2("tanh", trn__tanh_fw, trn__tanh_bw);

static trn_tensor *trn__unary(trn_model *m, const trn_op *op, trn_tensor *x) {
    trn_tensor *out;
    if (!m || !x) trn_fatal("trn_%s: model or input is NULL", op->name);
    x = trn__act(m, x);
    out = trn_tensor_new(m, op->name, x->ndim, x->shape);
    trn_op_apply(m, op, out, x, NULL, NULL, NULL);
    return out;
}
TRNDEF trn_tensor *trn_silu(trn_model *m, trn_tensor *x) { return trn__unary(m, &trn__silu_op, x); }
TRNDEF trn_tensor *trn_sigmoid(trn_model *m, trn_tensor *x) { return trn__unary(m, &trn__sigmoid_op, x); }
TRNDEF trn_tensor *trn_tanh(trn_model *m, trn_tensor *x) { return trn__unary(m, &trn__tanh_op, x); }

static void trn__softmax_fw(trn_model *m, trn_tape_entry *e) {   /* backward reads the output */
    int C = TRN__LAST(e->out);
    m->backend->softmax_forward(e->out->data, e->in[0]->data, (int)(e->out->size / (size_t)C), C);
}
static void trn__softmax_bw(trn_model *m, trn_tape_entry *e) {
    int C = TRN__LAST(e->out);
    m->backend->softmax_backward(trn_grad(m, e->in[0]), e->out->data, trn_grad(m, e->out),
                                 (int)(e->out->size / (size_t)C), C);
}
static const trn_op trn__softmax_op = TRN__OP2("softmax", trn__softmax_fw, trn__softmax_bw);
TRNDEF trn_tensor *trn_softmax(trn_model *m, trn_tensor *x) { return trn__unary(m, &trn__softmax_op, x); }

/* saved[0]: rstd (N floats) */
static void trn__rmsnorm_fw(trn_model *m, trn_tape_entry *e) {
    trn_tensor *x = e->in[0];
    int C = TRN__LAST(x), N = (int)(x->size / (size_t)C);
    e->saved[0] = trn_arena_alloc(m, sizeof(float) * (size_t)N);
    m->backend->rmsnorm_forward(e->out->data, (float *)e->saved[0], x->data, e->in[1]->data, N, C, e->farg[0]);
}
static void trn__rmsnorm_bw(trn_model *m, trn_tape_entry *e) {
    trn_tensor *x = e->in[0], *w = e->in[1];
    int C = TRN__LAST(x), N = (int)(x->size / (size_t)C);
    m->backend->rmsnorm_backward(trn_grad(m, x), trn_grad(m, w), trn_grad(m, e->out), x->data, w->data,
                                 (const float *)e->saved[0], N, C);
}
static const trn_op trn__rmsnorm_op = TRN__OP2("rmsnorm", trn__rmsnorm_fw, trn__rmsnorm_bw);
TRNDEF trn_tensor *trn_rmsnorm(trn_model *m, trn_tensor *x, trn_tensor *w, float eps) {
    trn_tensor *out;
    trn_op_args args;
    trn__not_null("trn_rmsnorm", x, w);
    x = trn__act(m, x); trn__weight(m, w, "trn_rmsnorm");
    trn__need(w->ndim == 1 && w->shape[0] == TRN__LAST(x), "trn_rmsnorm", x, w, "w must be (C), C = x's last dim");
    if (!(eps > 0.0f)) trn_fatal("trn_rmsnorm: eps must be > 0, got %g", (double)eps);
    memset(&args, 0, sizeof args);
    args.f[0] = eps;
    out = trn_tensor_new(m, "rmsnorm", x->ndim, x->shape);
    trn_op_apply(m, &trn__rmsnorm_op, out, x, w, NULL, &args);
    return out;
}

/* iarg: H heads per row, R rotated, hs, pos0, the scaling's type and
   original_max_pos; farg: theta, factor, low_freq_factor, high_freq_factor.
   Saves nothing. */
static trn_rope_scaling trn__rope_sc(const trn_tape_entry *e) {
    trn_rope_scaling sc;
    sc.type = e->iarg[4]; sc.original_max_pos = e->iarg[5];
    sc.factor = e->farg[1]; sc.low_freq_factor = e->farg[2]; sc.high_freq_factor = e->farg[3];
    return sc;
}
static void trn__rope_fw(trn_model *m, trn_tape_entry *e) {
    trn_tensor *x = e->in[0];
    trn_rope_scaling sc = trn__rope_sc(e);
    m->backend->rope_forward(e->out->data, x->data, x->shape[0], x->shape[1], e->iarg[0], e->iarg[1], e->iarg[2],
                             e->iarg[3], e->farg[0], sc.type ? &sc : NULL);
}
static void trn__rope_bw(trn_model *m, trn_tape_entry *e) {
    trn_tensor *x = e->in[0];
    trn_rope_scaling sc = trn__rope_sc(e);
    m->backend->rope_backward(trn_grad(m, x), trn_grad(m, e->out), x->shape[0], x->shape[1], e->iarg[0], e->iarg[1],
                              e->iarg[2], e->iarg[3], e->farg[0], sc.type ? &sc : NULL);
}
static const trn_op trn__rope_op = TRN__OP2("rope", trn__rope_fw, trn__rope_bw);
TRNDEF trn_tensor *trn_rope(trn_model *m, trn_tensor *qkv, int n_head, int n_kv_head, float theta, int pos0) {
    return trn_rope_scaled(m, qkv, n_head, n_kv_head, theta, NULL, pos0);
}
TRNDEF trn_tensor *trn_rope_scaled(trn_model *m, trn_tensor *qkv, int n_head, int n_kv_head, float theta,
                                   const trn_rope_scaling *sc, int pos0) {
    trn_tensor *out;
    trn_op_args args;
    int heads = n_head + 2 * n_kv_head;
    trn__not_null("trn_rope", m, qkv);
    qkv = trn__act(m, qkv);
    if (qkv->ndim != 3 || n_head <= 0 || n_kv_head <= 0 || n_head % n_kv_head || qkv->shape[2] % heads ||
        (qkv->shape[2] / heads) % 2) {
        char s[64];
        trn_fatal("trn_rope: qkv must be (B,T,(n_head+2*n_kv_head)*hs) with hs even and n_head a multiple of "
                  "n_kv_head; got %s with n_head=%d, n_kv_head=%d", trn_shape_str(qkv, s, 64), n_head, n_kv_head);
    }
    if (!(theta > 1.0f) || pos0 < 0) trn_fatal("trn_rope: theta must be > 1 (got %g), pos0 >= 0 (got %d)", (double)theta, pos0);
    if (sc && sc->type != TRN_ROPE_DEFAULT &&
        (sc->type < TRN_ROPE_DEFAULT || sc->type > TRN_ROPE_LLAMA3 || !(sc->factor > 0.0f) ||
         (sc->type != TRN_ROPE_LINEAR && sc->original_max_pos <= 0) ||
         (sc->type == TRN_ROPE_LLAMA3 && !(sc->low_freq_factor > 0.0f && sc->high_freq_factor > sc->low_freq_factor))))
        trn_fatal("trn_rope_scaled: scaling type %d with factor %g, low/high freq factors %g/%g, original_max_pos %d: "
                  "type 0..3, factor > 0, original_max_pos > 0 (dynamic, llama3), 0 < low < high (llama3)", sc->type,
                  (double)sc->factor, (double)sc->low_freq_factor, (double)sc->high_freq_factor, sc->original_max_pos);
    memset(&args, 0, sizeof args);
    args.i[0] = heads; args.i[1] = n_head + n_kv_head; args.i[2] = qkv->shape[2] / heads; args.i[3] = pos0;
    args.f[0] = theta;
    if (sc && sc->type != TRN_ROPE_DEFAULT) {
        args.i[4] = sc->type; args.i[5] = sc->original_max_pos;
        args.f[1] = sc->factor; args.f[2] = sc->low_freq_factor; args.f[3] = sc->high_freq_factor;
    }
    out = trn_tensor_new(m, "rope", 3, qkv->shape);
    trn_op_apply(m, &trn__rope_op, out, qkv, NULL, NULL, &args);
    return out;
}

/* ========================================================================
   >>opapi: trn_op_apply, trn_grad, trn_gradcheck
   ======================================================================== */
static TRN__TLS trn_tape_entry trn__op_scratch; /* the entry of an op not recorded */

TRNDEF trn_tape_entry *trn_op_apply(trn_model *m, const trn_op *op, trn_tensor *out, trn_tensor *a,
                                    trn_tensor *b, trn_tensor *c, const trn_op_args *args) {
    int dev;
    trn_op_fn fw, bw;
    trn_tape_entry *e;
    const char *name;
    if (!m || !op || !out) trn_fatal("trn_op_apply: model, op or output is NULL");
    name = op->name ? op->name : "(unnamed op)";
    dev = m->backend->place == TRN_DEVICE;
    fw = dev ? op->cuda_forward : op->forward;
    bw = dev ? op->cuda_backward : op->backward;
    if (!fw) trn_fatal("op %s: no forward for the %s backend (set trn_op.%s)", name, m->backend->name,
                       dev ? "cuda_forward" : "forward");
    if (m->act_dtype != TRN_F32 && !op->bf16)
        trn_fatal("op %s: its kernels are fp32 only (trn_op.bf16 = 0) and the model computes in %s: give them a %s "
                  "path (read t->dtype) and set .bf16 = 1, or train in fp32/tf32", name, trn_dtype_name(m->act_dtype),
                  trn_dtype_name(m->act_dtype));
    e = trn__record_ex(m, name, bw, out, a, b, c, 0); /* the profile's mark follows fw below */
    if (e && !bw) trn_fatal("op %s: an input requires a gradient but the op has no backward for the %s backend "
                            "(set trn_op.%s, or run it under no-grad)", name, m->backend->name,
                            dev ? "cuda_backward" : "backward");
    if (!e) { /* not on the tape: forward still gets an entry to read and fill */
        e = &trn__op_scratch;
        memset(e, 0, sizeof *e);
        e->op = name; e->out = out;
        e->in[0] = a; e->in[1] = b; e->in[2] = c;
    }
    if (args) {
        memcpy(e->iarg, args->i, sizeof e->iarg);
        memcpy(e->farg, args->f, sizeof e->farg);
    }
    fw(m, e);
    trn__prof_forward(m, name); /* --profile: the forward's time is this op's */
    return e;
}

/* The probe of the gradient checker is itself an op written with the API
   above: L = sum_i r_i * y_i with in[0] = y, in[1] = r (an input, no
   gradient). It computes on the host through download/upload, so one
   function serves both places. Saves nothing: backward reads r. */
static float *trn__host_copy(trn_model *m, const trn_tensor *t) {
    float *h = (float *)trn_alloc(sizeof(float) * t->size, TRN_KIND_TEMP);
    if (!h) trn_fatal("trn_gradcheck: %s", trn_error_reason());
    m->backend->download(h, t->data, sizeof(float) * t->size);
    return h;
}
static void trn__probe_fw(trn_model *m, trn_tape_entry *e) {
    float *y = trn__host_copy(m, e->in[0]), *r = trn__host_copy(m, e->in[1]), L;
    double sum = 0.0;
    size_t i;
    for (i = 0; i < e->in[0]->size; i++) sum += (double)r[i] * y[i];
    trn_free(y); trn_free(r);
    L = (float)sum;
    m->backend->upload(e->out->data, &L, sizeof L);
}
static void trn__probe_bw(trn_model *m, trn_tape_entry *e) {
    trn_tensor *y = e->in[0];
    float dL, *r = trn__host_copy(m, e->in[1]);
    float *dev = (float *)trn_arena_alloc(m, sizeof(float) * y->size);
    size_t i;
    m->backend->download(&dL, trn_grad(m, e->out), sizeof dL);
    for (i = 0; i < y->size; i++) r[i] *= dL;   /* dL/dy_i = r_i */
    m->backend->upload(dev, r, sizeof(float) * y->size);
    trn_free(r);
    m->backend->accumulate(trn_grad(m, y), dev, y->size);
}
static const trn_op trn__probe_op = {"gradcheck_probe", trn__probe_fw, trn__probe_bw, trn__probe_fw, trn__probe_bw, 0};

TRNDEF trn_gradcheck_desc trn_gradcheck_defaults(const trn_gradcheck_desc *desc) {
    trn_gradcheck_desc d;
    memset(&d, 0, sizeof d);
    if (desc) d = *desc;
    if (d.eps <= 0.0f) d.eps = 1e-2f;
    if (d.atol <= 0.0f) d.atol = 1e-3f;
    if (d.rtol <= 0.0f) d.rtol = 2e-2f;
    if (d.max_per_param <= 0) d.max_per_param = 32;
    if (d.seed == 0) d.seed = 1;
    return d;
}

/* L at the current parameters, summed in double (no tape) */
static double trn__gradcheck_eval(trn_model *m, trn_tensor *(*build)(trn_model *, void *), void *user,
                                  const float *r, size_t n, float *host) {
    trn_tensor *y;
    double L = 0.0;
    size_t i;
    trn_reset(m);
    y = build(m, user);
    if (!y || y->size != n) trn_fatal("trn_gradcheck: build() returned a different shape on a second call");
    m->backend->download(host, y->data, sizeof(float) * n);
    for (i = 0; i < n; i++) L += (double)r[i] * host[i];
    return L;
}

TRNDEF int trn_gradcheck(trn_model *m, trn_tensor *(*build)(trn_model *m, void *user), void *user,
                         const trn_gradcheck_desc *desc, trn_gradcheck_result *res) {
    trn_gradcheck_desc d = trn_gradcheck_defaults(desc);
    trn_gradcheck_result R;
    trn_rng rng;
    trn_tensor *y, *L;
    float *r, *ybuf, *grads, *params;
    size_t n;
    int k, grad_was = m ? m->grad_enabled : 0, one = 1;
    memset(&R, 0, sizeof R);
    if (!m || !build || !m->param_data) trn_fatal("trn_gradcheck: model (allocated) and build() are required");
    if (m->act_dtype != TRN_F32) trn_fatal("trn_gradcheck: finite differences need fp32 (the model is %s)", trn_dtype_name(m->act_dtype));
    trn_rng_seed(&rng, d.seed);
    /* the analytic gradient of L */
    m->grad_enabled = 1;
    trn_reset(m);
    y = build(m, user);
    if (!y) trn_fatal("trn_gradcheck: build() returned NULL");
    n = y->size;
    r = (float *)malloc(sizeof(float) * n);
    ybuf = (float *)malloc(sizeof(float) * n);
    grads = (float *)malloc(sizeof(float) * m->n_floats);
    params = (float *)malloc(sizeof(float) * m->n_floats);
    if (!r || !ybuf || !grads || !params) trn_fatal("trn_gradcheck: out of host memory");
    for (k = 0; k < (int)n; k++) r[k] = n == 1 ? 1.0f : trn_rng_normal(&rng);
    L = trn_tensor_new(m, "gradcheck_probe", 1, &one);
    trn_op_apply(m, &trn__probe_op, L, y, trn_input(m, "gradcheck_r", y->ndim, y->shape, r), NULL, NULL);
    if (!L->requires_grad) trn_fatal("trn_gradcheck: the output does not depend on any parameter");
    trn_zero_grad(m);
    trn_backward(m, L);
    m->backend->download(grads, m->grad_data, sizeof(float) * m->n_floats);
    m->backend->download(params, m->param_data, sizeof(float) * m->n_floats);
    /* the numeric one, element by element */
    m->grad_enabled = 0;
    for (k = 0; k < m->n_params; k++) {
        trn_tensor *p = m->params[k];
        int j, count = p->size < (size_t)d.max_per_param ? (int)p->size : d.max_per_param;
        int bad = 0;
        double worst = 0.0;
        for (j = 0; j < count; j++) {
            size_t idx = p->offset + (count == (int)p->size ? (size_t)j : trn_rng_below(&rng, (uint32_t)p->size));
            float x0 = params[idx], xp = x0 + d.eps, xm = x0 - d.eps;
            double Lp, Lm, fd, an = grads[idx], err;
            m->backend->upload(m->param_data + idx, &xp, sizeof xp);
            Lp = trn__gradcheck_eval(m, build, user, r, n, ybuf);
            m->backend->upload(m->param_data + idx, &xm, sizeof xm);
            Lm = trn__gradcheck_eval(m, build, user, r, n, ybuf);
            m->backend->upload(m->param_data + idx, &x0, sizeof x0);
            fd = (Lp - Lm) / ((double)xp - (double)xm);  /* the step float could represent */
            err = fabs(an - fd) / (d.atol + d.rtol * fabs(fd));
            if (err > worst) worst = err;
            if (fabs(an) > R.largest) R.largest = fabs(an);
            R.checked++;
            if (err > 1.0) {
                if (bad < 3) fprintf(stderr, "gradcheck: %s[%zu]: analytic %.6g, numeric %.6g\n", p->name,
                                     idx - p->offset, an, fd);
                bad++;
            }
        }
        if (worst > R.worst) R.worst = worst;
        R.failed += bad;
        if (d.verbose) printf("gradcheck: %-24s %d elements, worst %.3f of tolerance%s\n", p->name, count, worst,
                              bad ? "  FAIL" : "");
    }
    m->grad_enabled = grad_was;
    trn_reset(m);
    free(r); free(ybuf); free(grads); free(params);
    if (res) *res = R;
    return R.failed;
}

/* ========================================================================
   >>adamw
   ======================================================================== */
/* --- the update kernels (the CPU backend's adamw_update, sgd_update) ---- */
/* --- AdamW update over a contiguous slice (Loshchilov & Hutter 2019) -----
   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
   p -= lr * ( (m/bc1) / (sqrt(v/bc2) + eps) + weight_decay * p )
   bc1 = 1 - b1^t, bc2 = 1 - b2^t are the bias corrections for step t.
   Weight decay is decoupled: it shrinks p directly, not through g.
   trn_adamw_update_ref is the plain loop; trn_adamw_update below it is the
   kernel the CPU backend runs (the same formula, vectorized).            */
TRNDEF void trn_adamw_update_ref(float *p, const float *g, float *m, float *v, size_t n, float lr,
                                 float beta1, float beta2, float eps, float weight_decay,
                                 float bias_corr1, float bias_corr2) {
    size_t i;
    for (i = 0; i < n; i++) {
        float gi = g[i];
        float mi = beta1 * m[i] + (1.0f - beta1) * gi;
        float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        p[i] -= lr * ((mi / bias_corr1) / (sqrtf(vi / bias_corr2) + eps) + weight_decay * p[i]);
    }
}

/* trn_adamw_update: the same, fast (what the CPU backend runs). */
/* sqrtf may set errno, so compilers keep a loop that calls it scalar
   (short of -ffast-math or -fno-math-errno), and AdamW then took 20% of a
   GPT-2 124M step. On x86 the same formula is written with vector
   intrinsics, 16 (AVX-512) or 8 (AVX) elements at a time, and on AArch64
   with NEON, 4 at a time (IEEE division and square root, as the scalar
   loop: the same bits whichever path an element takes); the scalar loop
   does the tail. Threads split whole vectors, so an element always takes
   the same path whatever the thread count. */
#if defined(__AVX512F__)
#include <immintrin.h>
#define TRN__AW_VL 16
#define TRN__AW(op) _mm512_##op
typedef __m512 trn__aw_vec;
#elif defined(__AVX__)
#include <immintrin.h>
#define TRN__AW_VL 8
#define TRN__AW(op) _mm256_##op
typedef __m256 trn__aw_vec;
#elif defined(__ARM_NEON) && defined(__aarch64__)
/* AArch64 NEON, 4 at a time: the x86 names above, spelled in NEON */
#include <arm_neon.h>
#define TRN__AW_VL 4
#define TRN__AW(op) trn__aw_##op
typedef float32x4_t trn__aw_vec;
static inline float32x4_t trn__aw_loadu_ps(const float *p) { return vld1q_f32(p); }
static inline void trn__aw_storeu_ps(float *p, float32x4_t x) { vst1q_f32(p, x); }
static inline float32x4_t trn__aw_set1_ps(float x) { return vdupq_n_f32(x); }
static inline float32x4_t trn__aw_add_ps(float32x4_t a, float32x4_t b) { return vaddq_f32(a, b); }
static inline float32x4_t trn__aw_sub_ps(float32x4_t a, float32x4_t b) { return vsubq_f32(a, b); }
static inline float32x4_t trn__aw_mul_ps(float32x4_t a, float32x4_t b) { return vmulq_f32(a, b); }
static inline float32x4_t trn__aw_div_ps(float32x4_t a, float32x4_t b) { return vdivq_f32(a, b); }
static inline float32x4_t trn__aw_sqrt_ps(float32x4_t a) { return vsqrtq_f32(a); }
#endif
/* GCC 12 warns inside its own _mm512_sqrt_ps (its _mm512_undefined_ps,
   GCC bug 105593) when this loop is inlined in C++: not ours, silenced here */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
TRNDEF void trn_adamw_update(float *p, const float *g, float *m, float *v, size_t n, float lr,
                             float beta1, float beta2, float eps, float weight_decay,
                             float bias_corr1, float bias_corr2) {
    ptrdiff_t i, done = 0;
#ifdef TRN__AW_VL
    ptrdiff_t nv = (ptrdiff_t)(n / TRN__AW_VL);
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (i = 0; i < nv; i++) {
        size_t o = (size_t)i * TRN__AW_VL;
        trn__aw_vec G = TRN__AW(loadu_ps)(g + o), M = TRN__AW(loadu_ps)(m + o);
        trn__aw_vec V = TRN__AW(loadu_ps)(v + o), P = TRN__AW(loadu_ps)(p + o), den, upd;
        M = TRN__AW(add_ps)(TRN__AW(mul_ps)(TRN__AW(set1_ps)(beta1), M),
                            TRN__AW(mul_ps)(TRN__AW(set1_ps)(1.0f - beta1), G));
        V = TRN__AW(add_ps)(TRN__AW(mul_ps)(TRN__AW(set1_ps)(beta2), V),
                            TRN__AW(mul_ps)(TRN__AW(mul_ps)(TRN__AW(set1_ps)(1.0f - beta2), G), G));
        TRN__AW(storeu_ps)(m + o, M);
        TRN__AW(storeu_ps)(v + o, V);
        den = TRN__AW(add_ps)(TRN__AW(sqrt_ps)(TRN__AW(div_ps)(V, TRN__AW(set1_ps)(bias_corr2))),
                              TRN__AW(set1_ps)(eps));
        upd = TRN__AW(add_ps)(TRN__AW(div_ps)(TRN__AW(div_ps)(M, TRN__AW(set1_ps)(bias_corr1)), den),
                              TRN__AW(mul_ps)(TRN__AW(set1_ps)(weight_decay), P));
        TRN__AW(storeu_ps)(p + o, TRN__AW(sub_ps)(P, TRN__AW(mul_ps)(TRN__AW(set1_ps)(lr), upd)));
    }
    done = nv * TRN__AW_VL;
#endif
#ifdef _OPENMP
#pragma omp parallel for schedule(static) if ((ptrdiff_t)n - done > 4096)
#endif
    for (i = done; i < (ptrdiff_t)n; i++) {
        float gi = g[i];
        float mi = beta1 * m[i] + (1.0f - beta1) * gi;
        float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        p[i] -= lr * ((mi / bias_corr1) / (sqrtf(vi / bias_corr2) + eps) + weight_decay * p[i]);
    }
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

/* torch.optim.SGD, element by element (buf NULL when momentum is 0):
     d   = g + weight_decay * p                     L2 decay, into the gradient
     buf = d                                        first step (a new buffer)
     buf = momentum * buf + (1 - dampening) * d     every later step
     d   = nesterov ? d + momentum * buf : buf      look ahead along buf
     p  -= lr * d                                                              */
TRNDEF void trn_sgd_update(float *p, const float *g, float *buf, size_t n, float lr, float momentum,
                           float dampening, float weight_decay, int nesterov, int first) {
    ptrdiff_t i;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) if (n > 32768)
#endif
    for (i = 0; i < (ptrdiff_t)n; i++) {
        float d = g[i] + weight_decay * p[i];
        if (buf) {
            float b = first ? d : momentum * buf[i] + (1.0f - dampening) * d;
            buf[i] = b;
            d = nesterov ? d + momentum * b : b;
        }
        p[i] -= lr * d;
    }
}

TRNDEF trn_adamw_desc trn_adamw_defaults(const trn_adamw_desc *desc) {
    trn_adamw_desc d;
    memset(&d, 0, sizeof d);
    if (desc) d = *desc;
    else d.weight_decay = 0.01f;  /* no desc: torch.optim.AdamW's defaults */
    if (d.lr == 0.0f) d.lr = 1e-3f;
    if (d.algo == TRN_OPTIM_ADAMW) {
        if (d.beta1 == 0.0f) d.beta1 = 0.9f;
        if (d.beta2 == 0.0f) d.beta2 = 0.999f;
        if (d.eps == 0.0f) d.eps = 1e-8f;
    }
    if (d.no_weight_decay) d.weight_decay = 0.0f; /* a weight decay of 0 is 0 either way */
    return d;
}

TRNDEF void trn_adamw_init(trn_adamw *opt, const trn_adamw_desc *desc) {
    memset(opt, 0, sizeof *opt);
    opt->desc = trn_adamw_defaults(desc);
}

/* >>sync-free step: AdamW in one call over the optimizer's slice [lo,hi),
   described by runs (trn_adamw_seg), with the pending clip factor of
   trn_clip_grad_norm_async applied inside the same pass */
static int trn__seg_push(trn_adamw_seg *seg, int n, size_t end, int mode) {
    if (n > 0 && seg[n - 1].mode == mode) { seg[n - 1].end = end; return n; }
    seg[n].end = end;
    seg[n].mode = mode;
    return n + 1;
}
/* parameter groups (trn_param_group) give tensors their own lr or decay,
   which the one-launch flat AdamW does not take: those steps go per tensor */
static int trn__has_groups(const trn_model *m) {
    int i;
    for (i = 0; i < m->n_params; i++)
        if (m->params[i]->lr_scale != 1.0f || m->params[i]->weight_decay >= 0.0f) return 1;
    return 0;
}

/* a clip factor that trn_clip_grad_norm_async left on the device, for a
   step that cannot fold it into its kernel: scale the gradients now (one
   download: this path waits once more) */
static void trn__apply_pending_clip(trn_model *m) {
    float s;
    if (!m->sync_free.clip_pending) return;
    m->backend->download(&s, m->sync_free.gstat + 1, sizeof s);
    if (s != 1.0f) m->backend->scale(m->grad_data, s, m->n_floats);
    m->sync_free.clip_pending = 0;
}

static trn_result trn__adamw_step_flat(trn_adamw *opt, trn_model *m, float lr, float bc1, float bc2) {
    const trn_adamw_desc *d = &opt->desc;
    size_t lo = opt->lo, hi = opt->hi, cur = lo;
    int i, n = 0;
    trn_adamw_seg *seg = (trn_adamw_seg *)trn_alloc(sizeof(trn_adamw_seg) * (2 * (size_t)m->n_params + 1), TRN_KIND_TEMP);
    if (!seg) return trn_fail(TRN_ERR_NOMEM, "trn_adamw_step: %s", trn_error_reason());
    for (i = 0; i < m->n_params; i++) {
        const trn_tensor *t = m->params[i];
        size_t a = TRN__MAX(t->offset, lo), b = TRN__MIN(t->offset + t->size, hi);
        if (a >= b) continue;
        if (a < cur) trn_fatal("trn_adamw_step: parameter %s is out of order in the flat buffers", t->name);
        if (a > cur) n = trn__seg_push(seg, n, a - lo, TRN_ADAMW_SKIP); /* a gap: no parameter there */
        n = trn__seg_push(seg, n, b - lo, !t->requires_grad ? TRN_ADAMW_SKIP : t->decay ? TRN_ADAMW_DECAY : TRN_ADAMW_NO_DECAY);
        cur = b;
    }
    if (cur < hi) n = trn__seg_push(seg, n, hi - lo, TRN_ADAMW_SKIP);
    m->backend->adamw_flat(m->param_data + lo, m->grad_data + lo, opt->m, opt->v, hi - lo, seg, n, lr, d->beta1,
                           d->beta2, d->eps, d->weight_decay, bc1, bc2, m->sync_free.clip_pending ? m->sync_free.gstat + 1 : NULL,
                           m->mp.param_bf16 ? (uint16_t *)m->mp.param_bf16 + lo : NULL);
    m->sync_free.clip_pending = 0;
    trn_free(seg);
    return TRN_OK;
}

TRNDEF trn_result trn_adamw_step(trn_adamw *opt, trn_model *m, float lr) {
    const trn_adamw_desc *d;
    double bc1 = 1.0, bc2 = 1.0;
    size_t lo, hi;
    int i, sgd, first = 0;
    if (!opt || !m) return trn_fail(TRN_ERR_INVALID, "trn_adamw_step: NULL optimizer or model");
    if (!m->grad_data) return trn_fail(TRN_ERR_INVALID, "trn_adamw_step: no gradients (call trn_backward first)");
    if (lr < 0.0f || lr != lr) return trn_fail(TRN_ERR_INVALID, "trn_adamw_step: learning rate %g", (double)lr);
    d = &opt->desc;
    sgd = d->algo == TRN_OPTIM_SGD;
    if (!sgd && d->algo != TRN_OPTIM_ADAMW) return trn_fail(TRN_ERR_INVALID, "trn_adamw_step: unknown algo %d", (int)d->algo);
    if (sgd && (!(d->momentum >= 0.0f) || !(d->dampening >= 0.0f) ||
                (d->nesterov && (d->momentum <= 0.0f || d->dampening != 0.0f))))
        return trn_fail(TRN_ERR_INVALID, "trn_adamw_step: SGD momentum %g dampening %g nesterov %d (Nesterov needs "
                        "momentum > 0 and dampening 0, as torch.optim.SGD)", (double)d->momentum, (double)d->dampening, d->nesterov);
    if (sgd && !m->backend->sgd_update) return trn_fail(TRN_ERR_BACKEND, "trn_adamw_step: backend %s has no SGD kernel", m->backend->name);
    if (opt->hi == 0) { opt->lo = 0; opt->hi = m->n_floats; }
    lo = opt->lo; hi = opt->hi;
    if (lo >= hi || hi > m->n_floats) return trn_fail(TRN_ERR_INVALID, "trn_adamw_step: slice [%zu,%zu) of %zu", lo, hi, m->n_floats);
    /* state, lazily, as torch.optim does (the ledger shows it appear here):
       AdamW's m and v; SGD's momentum buffer in m (none for momentum 0) */
    if (!opt->m && (!sgd || d->momentum != 0.0f)) {
        opt->backend = m->backend;
        opt->m = (float *)m->backend->alloc((hi - lo) * sizeof(float), TRN_KIND_OPTIM);
        opt->v = opt->m && !sgd ? (float *)m->backend->alloc((hi - lo) * sizeof(float), TRN_KIND_OPTIM) : NULL;
        if (!opt->m || (!sgd && !opt->v)) {
            trn_result r = trn_fail(TRN_ERR_NOMEM, "trn_adamw_step: optimizer state: %s", trn_error_reason());
            if (opt->m) m->backend->free(opt->m);
            opt->m = NULL;
            return r;
        }
        m->backend->zero(opt->m, (hi - lo) * sizeof(float));
        if (opt->v) m->backend->zero(opt->v, (hi - lo) * sizeof(float));
        first = 1; /* SGD: a new buffer starts as the gradient itself */
    }
    opt->step++;
    if (!sgd) {
        bc1 = 1.0 - pow((double)d->beta1, (double)opt->step);
        bc2 = 1.0 - pow((double)d->beta2, (double)opt->step);
        if (m->backend->adamw_flat && !trn__has_groups(m)) return trn__adamw_step_flat(opt, m, lr, (float)bc1, (float)bc2);
    }
    trn__apply_pending_clip(m); /* this path cannot fold the clip factor in */
    /* one call per parameter tensor (decay and lr scale differ), each over a
       contiguous slice of the flat buffers */
    for (i = 0; i < m->n_params; i++) {
        const trn_tensor *t = m->params[i];
        size_t a = TRN__MAX(t->offset, lo), b = TRN__MIN(t->offset + t->size, hi);
        float wd = t->weight_decay >= 0.0f ? t->weight_decay : t->decay ? d->weight_decay : 0.0f;
        if (a >= b || !t->requires_grad) continue;
        if (sgd)
            m->backend->sgd_update(m->param_data + a, m->grad_data + a, opt->m ? opt->m + (a - lo) : NULL, b - a,
                                   lr * t->lr_scale, d->momentum, d->dampening, wd, d->nesterov, first);
        else
            m->backend->adamw_update(m->param_data + a, m->grad_data + a, opt->m + (a - lo), opt->v + (a - lo), b - a,
                                     lr * t->lr_scale, d->beta1, d->beta2, d->eps, wd, (float)bc1, (float)bc2);
    }
    trn_params_changed(m); /* bf16, per-tensor path: the copy in a second pass */
    return TRN_OK;
}

/* '*' matches any run of characters (also none); the rest literally */
static int trn__glob(const char *pat, const char *s) {
    const char *star = NULL, *from = NULL;
    while (*s) {
        if (*pat == '*') { star = pat++; from = s; }
        else if (*pat == *s) { pat++; s++; }
        else if (star) { pat = star + 1; s = ++from; } /* let the last '*' eat one more */
        else return 0;
    }
    while (*pat == '*') pat++;
    return *pat == 0;
}

TRNDEF int trn_param_group(trn_model *m, const char *pattern, float lr_scale, float weight_decay) {
    int i, n = 0;
    if (!m || !pattern) trn_fatal("trn_param_group: model or pattern is NULL");
    if (!(lr_scale >= 0.0f) || lr_scale > 1e30f) trn_fatal("trn_param_group %s: lr_scale %g (must be >= 0)", pattern, (double)lr_scale);
    if (weight_decay != weight_decay) trn_fatal("trn_param_group %s: weight_decay is NaN", pattern);
    for (i = 0; i < m->n_params; i++) {
        trn_tensor *t = m->params[i];
        if (!trn__glob(pattern, t->name)) continue;
        t->lr_scale = lr_scale;
        if (weight_decay >= 0.0f) t->weight_decay = weight_decay;
        n++;
    }
    if (n == 0) trn_fatal("trn_param_group: no parameter matches '%s' (%d parameters, e.g. '%s')", pattern, m->n_params,
                          m->n_params ? m->params[0]->name : "");
    return n;
}

TRNDEF void trn_adamw_free(trn_adamw *opt) {
    if (!opt) return;
    if (opt->m) opt->backend->free(opt->m);
    if (opt->v) opt->backend->free(opt->v);
    opt->m = opt->v = NULL;
}

TRNDEF float trn_lr_schedule(long long step, long long warmup, long long total, float max_lr, float min_lr) {
    trn_schedule s;
    memset(&s, 0, sizeof s);
    s.kind = TRN_SCHEDULE_COSINE;
    s.warmup = warmup; s.total = total; s.max_lr = max_lr; s.min_lr = min_lr;
    return trn_schedule_lr(&s, step);
}

TRNDEF float trn_schedule_lr(const trn_schedule *s, long long step) {
    double ratio, frac;
    long long decay;
    if (!s) trn_fatal("trn_schedule_lr: schedule is NULL");
    if (step < s->warmup) return s->max_lr * (float)(step + 1) / (float)s->warmup;
    if (s->kind == TRN_SCHEDULE_CONSTANT) return s->max_lr;
    if (step >= s->total || s->total <= s->warmup) return s->min_lr;
    ratio = (double)(step - s->warmup) / (double)(s->total - s->warmup); /* 0 -> 1 after warmup */
    switch (s->kind) {
    case TRN_SCHEDULE_COSINE:
        return s->min_lr + (float)(0.5 * (1.0 + cos(3.141592653589793 * ratio))) * (s->max_lr - s->min_lr);
    case TRN_SCHEDULE_LINEAR:
        return s->max_lr + (float)ratio * (s->min_lr - s->max_lr);
    case TRN_SCHEDULE_WSD:
        frac = s->decay_frac == 0.0f ? 0.2 : (double)s->decay_frac;
        if (!(frac > 0.0 && frac <= 1.0)) trn_fatal("trn_schedule_lr: WSD decay_frac %g (must be in (0,1])", frac);
        decay = (long long)(frac * (double)(s->total - s->warmup) + 0.5);
        if (decay < 1) decay = 1;
        if (step < s->total - decay) return s->max_lr; /* the stable part */
        ratio = (double)(step - (s->total - decay)) / (double)decay;
        return s->max_lr + (float)ratio * (s->min_lr - s->max_lr);
    default:
        trn_fatal("trn_schedule_lr: unknown kind %d", (int)s->kind);
    }
    return 0.0f;
}

static const char *const trn__schedule_names[] = {"cosine", "constant", "linear", "wsd"};
TRNDEF int trn_schedule_parse(const char *name) {
    int i;
    for (i = 0; name && i < 4; i++) if (strcmp(name, trn__schedule_names[i]) == 0) return i;
    return -1;
}
TRNDEF const char *trn_schedule_name(trn_schedule_kind kind) {
    return (int)kind >= 0 && (int)kind < 4 ? trn__schedule_names[kind] : "?";
}

TRNDEF float trn_grad_norm(trn_model *m) {
    size_t lo, hi;
    if (!m || !m->grad_data) return 0.0f;
    lo = m->shard.grad_lo; hi = m->shard.grad_hi ? m->shard.grad_hi : m->n_floats; /* (sharding: this process's slice) */
    return (float)sqrt(m->backend->sum_squares(m->grad_data + lo, hi - lo));
}

TRNDEF float trn_clip_grad_norm(trn_model *m, float max_norm) {
    float norm = trn_grad_norm(m);
    size_t lo = m->shard.grad_lo, hi = m->shard.grad_hi ? m->shard.grad_hi : m->n_floats;
    /* as torch.nn.utils.clip_grad_norm_: scale by max_norm / (norm + 1e-6) if that is < 1 */
    if (max_norm > 0.0f && norm > max_norm) m->backend->scale(m->grad_data + lo, max_norm / (norm + 1e-6f), hi - lo);
    return norm;
}

TRNDEF void trn_clip_grad_norm_async(trn_model *m, float max_norm, float *norm_out) {
    const trn_backend *be;
    if (!m || !m->grad_data) {
        if (norm_out) *norm_out = 0.0f;
        return;
    }
    be = m->backend;
    if (!be->grad_norm_clip || !be->adamw_flat || !be->download_async) { /* the CPU: clip now */
        float norm = trn_clip_grad_norm(m, max_norm);
        if (norm_out) *norm_out = norm;
        return;
    }
    if (!m->sync_free.gstat && !(m->sync_free.gstat = (float *)be->alloc(2 * sizeof(float), TRN_KIND_GRADS)))
        trn_fatal("trn_clip_grad_norm_async: %s", trn_error_reason());
    be->grad_norm_clip(m->sync_free.gstat, m->grad_data, m->n_floats, max_norm);
    m->sync_free.clip_pending = 1;
    if (norm_out) be->download_async(norm_out, m->sync_free.gstat, sizeof(float));
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
   floats): MR=6, NR=16, 12 accumulators. AArch64 NEON (32 registers of 4
   floats): MR=8, NR=12, 24 accumulators + 3 B vectors + 1-2 for A. None of
   these: a 4 x 16 tile in plain C loops that the compiler vectorizes as
   well as the target allows.

   Threads. C is cut into one block per thread along whole panels (along N
   or M, whichever gives the cheapest block, counting what it must pack);
   each thread runs the loops above on its block with its own packing
   buffer. Every element of C is summed the same way (KC blocks in order, k
   in order inside a block) whatever the cut, so the result is bitwise the
   same for ANY thread count. Small products, and calls from inside a
   parallel region (attention runs one GEMM per head inside its own
   parallel loop), use one thread. Up to 4 rows (a few tokens) skip packing:
   see trn__sgemm_rows and trn__sgemm_dots.

   Packing buffers are per thread, kept between calls and grown on demand
   (ledger kind "temporary"), so steady-state training allocates nothing
   here: at most 3.4 MB per thread at the default block sizes.
   ======================================================================== */
#ifdef TRAIN_USE_CBLAS
#include <cblas.h>
#elif defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
#elif defined(__ARM_NEON) && defined(__aarch64__)
#include <arm_neon.h>
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
#define trn__vadd _mm512_add_ps
#define TRN__SIMD 1
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
#define trn__vadd _mm256_add_ps
#define TRN__SIMD 1
#elif defined(__ARM_NEON) && defined(__aarch64__)
#define TRN__MR 8
#define TRN__NV 3
#define TRN__VL 4
typedef float32x4_t trn__vec;
#define trn__vzero() vdupq_n_f32(0.0f)
#define trn__vset1 vdupq_n_f32
#define trn__vload vld1q_f32
#define trn__vloadu vld1q_f32
#define trn__vstoreu vst1q_f32
#define trn__vfma(a, b, c) vfmaq_f32(c, a, b) /* a*b + c, as _mm*_fmadd_ps */
#define trn__vmul vmulq_f32
#define trn__vadd vaddq_f32
#define TRN__SIMD 1
#else
#define TRN__MR 4
#define TRN__NV 1
#define TRN__VL 16 /* plain C: one "vector" is a loop of 16 floats         */
#endif
#define TRN__NR (TRN__NV * TRN__VL)
#define TRN__KC 256                         /* KC x NR floats of B: 32 KB, L1 */
#define TRN__MC ((264 / TRN__MR) * TRN__MR) /* MC x KC floats of A: 264 KB, L2 */
#define TRN__NC 3072                        /* KC x NC floats of B: 3 MB, L3  */
#define TRN__PAR_MIN (1 << 22) /* M*N*K below this (~40 us of work): one thread */

/* C tile (MR x NR) = alpha * a @ b + beta * C, where a is one packed A panel
   (kc steps of MR floats) and b one packed B panel (kc steps of NR floats).
   The k loop is unrolled 4 times: the loop's own counting then takes fewer
   of the issue slots the loads and FMAs need (AVX2 on AMD Zen 3 went from
   0.87-0.92 to 0.93-0.96 of OpenBLAS's single-thread rate). */
#if defined(__clang__)
#define TRN__UNROLL4 _Pragma("unroll 4")
#elif defined(__GNUC__)
#define TRN__UNROLL4 _Pragma("GCC unroll 4")
#else
#define TRN__UNROLL4
#endif
#if defined(TRN__SIMD) && defined(__ARM_NEON) && defined(__aarch64__)
/* NEON, 8 x 12: the 24 accumulators are named, as in trn__fa_gemm (in an
   array, GCC at -O2 keeps them in memory). Each step loads the 8 values of
   A as two vectors and multiplies by one lane of them (fmla by element):
   24 accumulators + 3 of B + 2 of A = 29 of the 32 registers. */
static void trn__sgemm_kernel(int kc, const float *a, const float *b, float *c, int ldc,
                              float alpha, float beta) {
    float32x4_t c00, c01, c02, c10, c11, c12, c20, c21, c22, c30, c31, c32;
    float32x4_t c40, c41, c42, c50, c51, c52, c60, c61, c62, c70, c71, c72, acc[8][3];
    int i, v, k;
    for (i = 0; i < 8; i++) { /* see the x86 kernel below: C's lines, early */
        __builtin_prefetch(c + (size_t)i * ldc, 1);
        __builtin_prefetch(c + (size_t)i * ldc + 11, 1);
    }
    c00 = c01 = c02 = c10 = c11 = c12 = c20 = c21 = c22 = c30 = c31 = c32 = vdupq_n_f32(0.0f);
    c40 = c41 = c42 = c50 = c51 = c52 = c60 = c61 = c62 = c70 = c71 = c72 = vdupq_n_f32(0.0f);
    TRN__UNROLL4
    for (k = 0; k < kc; k++, a += 8, b += 12) {
        float32x4_t b0 = vld1q_f32(b), b1 = vld1q_f32(b + 4), b2 = vld1q_f32(b + 8);
        float32x4_t lo = vld1q_f32(a), hi = vld1q_f32(a + 4);
#define TRN__NEON_ROW(r, x, l)                                                                    \
    c##r##0 = vfmaq_laneq_f32(c##r##0, b0, x, l); c##r##1 = vfmaq_laneq_f32(c##r##1, b1, x, l);   \
    c##r##2 = vfmaq_laneq_f32(c##r##2, b2, x, l);
        TRN__NEON_ROW(0, lo, 0) TRN__NEON_ROW(1, lo, 1) TRN__NEON_ROW(2, lo, 2) TRN__NEON_ROW(3, lo, 3)
        TRN__NEON_ROW(4, hi, 0) TRN__NEON_ROW(5, hi, 1) TRN__NEON_ROW(6, hi, 2) TRN__NEON_ROW(7, hi, 3)
#undef TRN__NEON_ROW
    }
    acc[0][0] = c00; acc[0][1] = c01; acc[0][2] = c02; acc[1][0] = c10; acc[1][1] = c11; acc[1][2] = c12;
    acc[2][0] = c20; acc[2][1] = c21; acc[2][2] = c22; acc[3][0] = c30; acc[3][1] = c31; acc[3][2] = c32;
    acc[4][0] = c40; acc[4][1] = c41; acc[4][2] = c42; acc[5][0] = c50; acc[5][1] = c51; acc[5][2] = c52;
    acc[6][0] = c60; acc[6][1] = c61; acc[6][2] = c62; acc[7][0] = c70; acc[7][1] = c71; acc[7][2] = c72;
    for (i = 0; i < 8; i++)
        for (v = 0; v < 3; v++) {
            float *p = c + (size_t)i * ldc + 4 * v;
            float32x4_t y = vmulq_n_f32(acc[i][v], alpha);
            vst1q_f32(p, beta == 0.0f ? y : vfmaq_n_f32(y, vld1q_f32(p), beta)); /* beta 0: never read C */
        }
}
#elif defined(TRN__SIMD)
static void trn__sgemm_kernel(int kc, const float *a, const float *b, float *c, int ldc,
                              float alpha, float beta) {
    trn__vec acc[TRN__MR][TRN__NV], va;
    int i, v, k;
#if defined(__GNUC__) || defined(__clang__)
    /* C is read only after all kc steps, but its tile is rarely in cache
       (a row of C is N floats away from the next): ask for its lines now,
       so they arrive while the FMAs run instead of stalling the stores */
    for (i = 0; i < TRN__MR; i++) {
        __builtin_prefetch(c + (size_t)i * ldc, 1);
        __builtin_prefetch(c + (size_t)i * ldc + TRN__NR - 1, 1);
    }
#endif
    for (i = 0; i < TRN__MR; i++)
        for (v = 0; v < TRN__NV; v++) acc[i][v] = trn__vzero();
    TRN__UNROLL4
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

/* Transposing pack: `rows` rows of a matrix (row r at src + r*lds, read
   along k) are written as kc groups of `lanes` floats, lanes >= rows:
   dst[k*ldd + r] = src[r*lds + k], and 0 for rows <= r < lanes. With SIMD,
   a square of STRIP x STRIP floats is transposed in registers (unpack
   pairs, then quads, then 128-bit lanes), so each store writes a whole
   group instead of one float; the k tail goes one float at a time. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__cplusplus)
/* g++ 12 warns about the deliberately undefined lanes inside the
   unpack/shuffle intrinsics (-Wmaybe-uninitialized); they are fine */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#define TRN__POP_DIAGNOSTIC 1
#endif
#if defined(__AVX512F__)
#define TRN__STRIP 16
static void trn__transpose_strip(const float *src, size_t lds, int rows, int lanes, int kc,
                                 float *dst, int ldd, int *k_done) {
    __mmask16 mask = (__mmask16)((1u << lanes) - 1u);
    int k, r, q, j;
    for (k = 0; k + 16 <= kc; k += 16) {
        __m512 v[16], t[16], u[16];
        for (r = 0; r < 16; r++)
            v[r] = r < rows ? _mm512_loadu_ps(src + (size_t)r * lds + k) : _mm512_setzero_ps();
        for (r = 0; r < 16; r += 2) { /* pairs: (v0[0] v1[0] v0[1] v1[1]) per 128-bit lane */
            t[r] = _mm512_unpacklo_ps(v[r], v[r + 1]);
            t[r + 1] = _mm512_unpackhi_ps(v[r], v[r + 1]);
        }
        for (q = 0; q < 16; q += 4) { /* quads: lane L of u[q+j] = column 4L+j, rows q..q+3 */
            u[q + 0] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[q]), _mm512_castps_pd(t[q + 2])));
            u[q + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[q]), _mm512_castps_pd(t[q + 2])));
            u[q + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[q + 1]), _mm512_castps_pd(t[q + 3])));
            u[q + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[q + 1]), _mm512_castps_pd(t[q + 3])));
        }
        for (j = 0; j < 4; j++) { /* 128-bit lanes: column 4L+j gathers lane L of u[j], u[4+j], ... */
            __m512 x0 = _mm512_shuffle_f32x4(u[j], u[4 + j], 0x44);
            __m512 x1 = _mm512_shuffle_f32x4(u[j], u[4 + j], 0xEE);
            __m512 x2 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0x44);
            __m512 x3 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0xEE);
            _mm512_mask_storeu_ps(dst + (size_t)(k + j) * ldd, mask, _mm512_shuffle_f32x4(x0, x2, 0x88));
            _mm512_mask_storeu_ps(dst + (size_t)(k + 4 + j) * ldd, mask, _mm512_shuffle_f32x4(x0, x2, 0xDD));
            _mm512_mask_storeu_ps(dst + (size_t)(k + 8 + j) * ldd, mask, _mm512_shuffle_f32x4(x1, x3, 0x88));
            _mm512_mask_storeu_ps(dst + (size_t)(k + 12 + j) * ldd, mask, _mm512_shuffle_f32x4(x1, x3, 0xDD));
        }
    }
    *k_done = k;
}
#elif defined(__AVX2__) && defined(__FMA__)
#define TRN__STRIP 8
static void trn__transpose_strip(const float *src, size_t lds, int rows, int lanes, int kc,
                                 float *dst, int ldd, int *k_done) {
    __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(lanes), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    int k, r, q, j;
    for (k = 0; k + 8 <= kc; k += 8) {
        __m256 v[8], t[8], u[8];
        for (r = 0; r < 8; r++)
            v[r] = r < rows ? _mm256_loadu_ps(src + (size_t)r * lds + k) : _mm256_setzero_ps();
        for (r = 0; r < 8; r += 2) {
            t[r] = _mm256_unpacklo_ps(v[r], v[r + 1]);
            t[r + 1] = _mm256_unpackhi_ps(v[r], v[r + 1]);
        }
        for (q = 0; q < 8; q += 4) {
            u[q + 0] = _mm256_shuffle_ps(t[q], t[q + 2], 0x44);
            u[q + 1] = _mm256_shuffle_ps(t[q], t[q + 2], 0xEE);
            u[q + 2] = _mm256_shuffle_ps(t[q + 1], t[q + 3], 0x44);
            u[q + 3] = _mm256_shuffle_ps(t[q + 1], t[q + 3], 0xEE);
        }
        for (j = 0; j < 4; j++) {
            v[j] = _mm256_permute2f128_ps(u[j], u[4 + j], 0x20);     /* column k+j   */
            v[4 + j] = _mm256_permute2f128_ps(u[j], u[4 + j], 0x31); /* column k+4+j */
        }
        /* AMD's Zen cores run a masked store (vmaskmovps) as a slow
           microcode sequence, which cost a quarter of the time of x @ W^T:
           whole groups (8: B's panels) and 6 (A's, MR = 6) store without */
        if (lanes == 8) {
            for (j = 0; j < 8; j++) _mm256_storeu_ps(dst + (size_t)(k + j) * ldd, v[j]);
        } else if (lanes == 6) {
            for (j = 0; j < 8; j++) {
                float *d = dst + (size_t)(k + j) * ldd;
                _mm_storeu_ps(d, _mm256_castps256_ps128(v[j]));
                _mm_storel_pi((__m64 *)(void *)(d + 4), _mm256_extractf128_ps(v[j], 1));
            }
        } else {
            for (j = 0; j < 8; j++) _mm256_maskstore_ps(dst + (size_t)(k + j) * ldd, mask, v[j]);
        }
    }
    *k_done = k;
}
#elif defined(__ARM_NEON) && defined(__aarch64__)
#define TRN__STRIP 4
static void trn__transpose_strip(const float *src, size_t lds, int rows, int lanes, int kc,
                                 float *dst, int ldd, int *k_done) {
    int k, r;
    if (lanes != 4) { *k_done = 0; return; } /* (never: MR and NR are multiples of 4) */
    for (k = 0; k + 4 <= kc; k += 4) {
        float32x4_t v[4], t0, t1, t2, t3;
        for (r = 0; r < 4; r++) v[r] = r < rows ? vld1q_f32(src + (size_t)r * lds + k) : vdupq_n_f32(0.0f);
        t0 = vtrn1q_f32(v[0], v[1]); t1 = vtrn2q_f32(v[0], v[1]); /* (v0[0] v1[0] v0[2] v1[2]), ... */
        t2 = vtrn1q_f32(v[2], v[3]); t3 = vtrn2q_f32(v[2], v[3]);
        vst1q_f32(dst + (size_t)(k + 0) * ldd, vreinterpretq_f32_f64(vtrn1q_f64(vreinterpretq_f64_f32(t0), vreinterpretq_f64_f32(t2))));
        vst1q_f32(dst + (size_t)(k + 1) * ldd, vreinterpretq_f32_f64(vtrn1q_f64(vreinterpretq_f64_f32(t1), vreinterpretq_f64_f32(t3))));
        vst1q_f32(dst + (size_t)(k + 2) * ldd, vreinterpretq_f32_f64(vtrn2q_f64(vreinterpretq_f64_f32(t0), vreinterpretq_f64_f32(t2))));
        vst1q_f32(dst + (size_t)(k + 3) * ldd, vreinterpretq_f32_f64(vtrn2q_f64(vreinterpretq_f64_f32(t1), vreinterpretq_f64_f32(t3))));
    }
    *k_done = k;
}
#else
#define TRN__STRIP 16
static void trn__transpose_strip(const float *src, size_t lds, int rows, int lanes, int kc,
                                 float *dst, int ldd, int *k_done) {
    (void)src; (void)lds; (void)rows; (void)lanes; (void)kc; (void)dst; (void)ldd;
    *k_done = 0; /* all of it in the plain loop of trn__pack_strip */
}
#endif

#ifdef TRN__POP_DIAGNOSTIC
#pragma GCC diagnostic pop
#endif

static void trn__pack_strip(const float *src, size_t lds, int rows, int lanes, int kc,
                            float *dst, int ldd) {
    int k, r;
    trn__transpose_strip(src, lds, rows, lanes, kc, dst, ldd, &k);
    for (; k < kc; k++)
        for (r = 0; r < lanes; r++) dst[(size_t)k * ldd + r] = r < rows ? src[(size_t)r * lds + k] : 0.0f;
}

/* Copying pack: row k of the block (at src + k*lds) holds `width` values,
   cut into panels of `lanes` (zeros past width): panel p, step k gets
   src[k*lds + p*lanes + 0..lanes-1]. Rows are read front to back, so the
   hardware prefetcher streams them. */
static void trn__pack_rows(const float *src, size_t lds, int width, int lanes, int kc, float *dst) {
    int k, p, l;
    for (k = 0; k < kc; k++) {
        const float *s = src + (size_t)k * lds;
        float *d = dst + (size_t)k * lanes;
        for (p = 0; p < width; p += lanes, d += (size_t)lanes * kc) {
            int n = TRN__MIN(lanes, width - p);
            if (n == lanes) { /* a copy of a size the compiler knows is 2 or 3 vector moves */
                if (lanes == TRN__NR) memcpy(d, s + p, sizeof(float) * TRN__NR);
                else if (lanes == TRN__MR) memcpy(d, s + p, sizeof(float) * TRN__MR);
                else for (l = 0; l < lanes; l++) d[l] = s[p + l];
            } else {
                for (l = 0; l < n; l++) d[l] = s[p + l];
                for (; l < lanes; l++) d[l] = 0.0f;
            }
        }
    }
}

/* pack op(A)[i0:+mc, p0:+kc] as panels of MR rows; in a panel, step k holds
   the MR values op(A)[i0+ir+0..MR-1, p0+k] (zeros past the last row) */
static void trn__pack_a(const trn__gemm *g, int i0, int p0, int mc, int kc, float *dst) {
    int ir;
    if (g->ta) { /* op(A)[i,k] = A[k,i]: row k of A holds the values */
        trn__pack_rows(g->A + (size_t)p0 * g->lda + i0, (size_t)g->lda, mc, TRN__MR, kc, dst);
        return;
    }
    for (ir = 0; ir < mc; ir += TRN__MR, dst += (size_t)TRN__MR * kc) { /* transpose MR rows */
#if TRN__MR <= TRN__STRIP
        trn__pack_strip(g->A + (size_t)(i0 + ir) * g->lda + p0, (size_t)g->lda,
                        TRN__MIN(TRN__MR, mc - ir), TRN__MR, kc, dst, TRN__MR);
#else /* NEON: MR = 8 rows as two strips of 4 */
        int h;
        for (h = 0; h < TRN__MR; h += TRN__STRIP) {
            int rows = TRN__MAX(0, TRN__MIN(TRN__STRIP, mc - ir - h));
            trn__pack_strip(g->A + (size_t)(i0 + ir + (rows ? h : 0)) * g->lda + p0, (size_t)g->lda, rows,
                            TRN__STRIP, kc, dst + h, TRN__MR);
        }
#endif
    }
}

/* pack op(B)[p0:+kc, j0:+nc] as panels of NR columns; in a panel, step k
   holds the NR values op(B)[p0+k, j0+jr+0..NR-1] (zeros past the last one) */
static void trn__pack_b(const trn__gemm *g, int p0, int j0, int kc, int nc, float *dst) {
    int jr, h;
    if (!g->tb) { /* op(B)[k,j] = B[k,j]: row k of B holds the values */
        trn__pack_rows(g->B + (size_t)p0 * g->ldb + j0, (size_t)g->ldb, nc, TRN__NR, kc, dst);
        return;
    }
    /* op(B)[k,j] = B[j,k] (W^T of nn.Linear): transpose NR rows, STRIP at a time */
    for (jr = 0; jr < nc; jr += TRN__NR, dst += (size_t)TRN__NR * kc) {
        int n = TRN__MIN(TRN__NR, nc - jr);
        for (h = 0; h < TRN__NR; h += TRN__STRIP) {
            int rows = TRN__MAX(0, TRN__MIN(TRN__STRIP, n - h));
            const float *src = g->B + (size_t)(j0 + jr + (rows ? h : 0)) * g->ldb + p0;
            trn__pack_strip(src, (size_t)g->ldb, rows, TRN__STRIP, kc, dst + h, TRN__NR);
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

/* The per-thread packing buffer, grown on demand and kept. Each one is also
   listed in trn__pack_all, so leak checkers see it as still in use (a
   thread's own variables vanish from their view when it ends). Where the
   compiler has no thread-local storage, each call allocates and frees. */
#if defined(__cplusplus) || defined(__GNUC__) || defined(__clang__) || defined(_MSC_VER)
#define TRN__PACK_KEEP 1
static TRN__TLS float *trn__pack_buf;
static TRN__TLS size_t trn__pack_cap; /* floats */
static TRN__TLS int trn__pack_slot;   /* 1 + its index in trn__pack_all; 0: none */
static float *trn__pack_all[256];

static float *trn__pack_scratch(size_t floats) {
    float *p;
    if (floats <= trn__pack_cap) return trn__pack_buf;
    p = (float *)trn_alloc(floats * sizeof(float), TRN_KIND_TEMP);
    if (!p) return NULL;
    trn_free(trn__pack_buf);
    trn__pack_buf = p;
    trn__pack_cap = floats;
#ifdef _OPENMP
#pragma omp critical(trn__pack_lock)
#endif
    {
        int i;
        for (i = 0; i < 256 && !trn__pack_slot; i++)
            if (!trn__pack_all[i]) trn__pack_slot = i + 1;
        if (trn__pack_slot) trn__pack_all[trn__pack_slot - 1] = p;
    }
    return p;
}
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
    Ap = trn__pack_scratch(need);
#else
    Ap = (float *)trn_alloc(need * sizeof(float), TRN_KIND_TEMP);
#endif
    if (!Ap) { /* no memory for the packing buffer: still give the right answer */
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

/* A few rows and op(B) = B: C[i,:] = beta C[i,:] + sum_k (alpha op(A)[i,k]) B[k,:]
   straight from the rows of B, for columns n0..n1 (in chunks that stay in
   L1). Packing B would cost as much as the product itself here, and an
   MR-row tile would be mostly padding. Four k at a time per load of C. */
#define TRN__FEW_ROWS 4
static void trn__sgemm_rows(const trn__gemm *g, int n0, int n1) {
    int jb, i, k, j, u;
    for (jb = n0; jb < n1; jb += 512) {
        int nb = TRN__MIN(512, n1 - jb);
        for (i = 0; i < g->M; i++) {
            float *c = g->C + (size_t)i * g->ldc + jb;
            for (j = 0; j < nb; j++) c[j] = g->beta == 0.0f ? 0.0f : g->beta * c[j];
        }
        for (k = 0; k < g->K; k += 4) {
            int ku = TRN__MIN(4, g->K - k);
            const float *b[4];
            for (u = 0; u < 4; u++) b[u] = g->B + (size_t)(k + TRN__MIN(u, ku - 1)) * g->ldb + jb;
            for (i = 0; i < g->M; i++) {
                float a[4], *c = g->C + (size_t)i * g->ldc + jb;
                for (u = 0; u < 4; u++) /* a[u] = 0 past K: adds exact zeros */
                    a[u] = u >= ku ? 0.0f
                         : g->alpha * (g->ta ? g->A[(size_t)(k + u) * g->lda + i]
                                             : g->A[(size_t)i * g->lda + k + u]);
                j = 0;
#ifdef TRN__SIMD
                {
                    trn__vec a0 = trn__vset1(a[0]), a1 = trn__vset1(a[1]);
                    trn__vec a2 = trn__vset1(a[2]), a3 = trn__vset1(a[3]);
                    for (; j + TRN__VL <= nb; j += TRN__VL) {
                        trn__vec acc = trn__vloadu(c + j);
                        acc = trn__vfma(a0, trn__vloadu(b[0] + j), acc);
                        acc = trn__vfma(a1, trn__vloadu(b[1] + j), acc);
                        acc = trn__vfma(a2, trn__vloadu(b[2] + j), acc);
                        acc = trn__vfma(a3, trn__vloadu(b[3] + j), acc);
                        trn__vstoreu(c + j, acc);
                    }
                }
#endif
                for (; j < nb; j++)
                    c[j] = (((c[j] + a[0] * b[0][j]) + a[1] * b[1][j]) + a[2] * b[2][j]) + a[3] * b[3][j];
            }
        }
    }
}

/* A few rows, op(A) = A and op(B) = B^T (x @ W^T for a few tokens): C[i,j]
   is the dot product of row i of A and row j of B, both contiguous, so B is
   read once, straight, with no transpose into a packed panel. */
static float trn__dot(const float *a, const float *b, int n) {
    float s = 0.0f;
    int k = 0;
#ifdef TRN__SIMD
    {
        float lane[TRN__VL];
        trn__vec s0 = trn__vzero(), s1 = trn__vzero(), s2 = trn__vzero(), s3 = trn__vzero();
        int l;
        for (; k + 4 * TRN__VL <= n; k += 4 * TRN__VL) {
            s0 = trn__vfma(trn__vloadu(a + k), trn__vloadu(b + k), s0);
            s1 = trn__vfma(trn__vloadu(a + k + TRN__VL), trn__vloadu(b + k + TRN__VL), s1);
            s2 = trn__vfma(trn__vloadu(a + k + 2 * TRN__VL), trn__vloadu(b + k + 2 * TRN__VL), s2);
            s3 = trn__vfma(trn__vloadu(a + k + 3 * TRN__VL), trn__vloadu(b + k + 3 * TRN__VL), s3);
        }
        for (; k + TRN__VL <= n; k += TRN__VL) s0 = trn__vfma(trn__vloadu(a + k), trn__vloadu(b + k), s0);
        trn__vstoreu(lane, trn__vadd(trn__vadd(s0, s1), trn__vadd(s2, s3)));
        for (l = 0; l < TRN__VL; l++) s += lane[l];
    }
#else
    {
        float p[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        int l;
        for (; k + 8 <= n; k += 8)
            for (l = 0; l < 8; l++) p[l] += a[k + l] * b[k + l];
        for (l = 0; l < 8; l++) s += p[l];
    }
#endif
    for (; k < n; k++) s += a[k] * b[k];
    return s;
}

static void trn__sgemm_dots(const trn__gemm *g, int n0, int n1) {
    int i, j;
    for (j = n0; j < n1; j++)
        for (i = 0; i < g->M; i++) {
            float s = g->alpha * trn__dot(g->A + (size_t)i * g->lda, g->B + (size_t)j * g->ldb, g->K);
            float *p = g->C + (size_t)i * g->ldc + j;
            *p = g->beta == 0.0f ? s : s + g->beta * *p;
        }
}

TRNDEF void trn_sgemm(int trans_a, int trans_b, int M, int N, int K, float alpha,
                      const float *A, int lda, const float *B, int ldb, float beta,
                      float *C, int ldc) {
    trn__gemm g;
    int nt = 1, gm = 1, gn = 1, t, um, un, d, few;
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
    few = M <= TRN__FEW_ROWS && (!trans_b || !trans_a); /* no packing: rows or dots */
#ifdef _OPENMP
    /* threads only for work worth more than a fork and join: FMAs, plus C's
       traffic; the few-rows paths are bound by reading B once */
    if (!omp_in_parallel() &&
        (few ? 4.0 * N * K : (double)M * N * K + 16.0 * M * N) >= TRN__PAR_MIN)
        nt = omp_get_max_threads();
#endif
    if (few) { /* threads take whole 64-byte lines of C */
        un = (N + 15) / 16;
        if (nt == 1) {
            if (trans_b) trn__sgemm_dots(&g, 0, N); else trn__sgemm_rows(&g, 0, N);
            return;
        }
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt)
#endif
        for (t = 0; t < nt; t++) {
            int n0 = (int)TRN__MIN((long long)N, (long long)un * t / nt * 16);
            int n1 = (int)TRN__MIN((long long)N, (long long)un * (t + 1) / nt * 16);
            if (n0 < n1) {
                if (trans_b) trn__sgemm_dots(&g, n0, n1); else trn__sgemm_rows(&g, n0, n1);
            }
        }
        return;
    }
    if (nt == 1) { trn__sgemm_block(&g, 0, M, 0, N); return; }
    /* the grid gm x gn = nt of C blocks with the cheapest largest block, per
       step of k: rows*cols FMAs, plus the floats it packs (its rows of A once
       per NC columns, its columns of B once) at ~20 FMAs' time each */
    um = (M + TRN__MR - 1) / TRN__MR;
    un = (N + TRN__NR - 1) / TRN__NR;
    for (d = nt; d >= 1; d--) {
        if (nt % d == 0) {
            long long rows = (long long)((um + nt / d - 1) / (nt / d)) * TRN__MR;
            long long cols = (long long)((un + d - 1) / d) * TRN__NR;
            long long cost = rows * cols + 20 * (rows * ((cols + TRN__NC - 1) / TRN__NC) + cols);
            if (best < 0 || cost < best) { best = cost; gn = d; gm = nt / d; }
        }
    }
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt)
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

/* >>json implementation */
/* ========================================================================
   >>json
   UTF-8 (decode, encode) and one JSON reader: a cursor (trn__jp) that
   the safetensors header, vocab.json and the public trn_json_* calls
   (extras/train_json.h) all walk with. Every read checks the bounds first.
   ======================================================================== */
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#define TRN__NO_CHAR 0xFFFFFFFFu   /* "not a character": bad UTF-8 */
#define TRN__JSON_MAX_DEPTH 64     /* nesting the reader follows    */

/* one UTF-8 character at s[0..n), n >= 1: returns its length and sets *cp;
   an invalid, overlong or truncated sequence, a surrogate, or anything
   above U+10FFFF (RFC 3629) is one byte, *cp = NO_CHAR */
static size_t trn__utf8_decode(const unsigned char *s, size_t n, uint32_t *cp) {
    uint32_t c = s[0], min;
    size_t len, i;
    *cp = TRN__NO_CHAR;
    if (c < 0x80) { *cp = c; return 1; }
    if (c >= 0xC2 && c <= 0xDF) { len = 2; c &= 0x1F; min = 0x80; }
    else if (c >= 0xE0 && c <= 0xEF) { len = 3; c &= 0x0F; min = 0x800; }
    else if (c >= 0xF0 && c <= 0xF4) { len = 4; c &= 0x07; min = 0x10000; }
    else return 1;
    if (n < len) return 1;
    for (i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 1;
        c = (c << 6) | (s[i] & 0x3F);
    }
    if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return 1;
    *cp = c;
    return len;
}

/* code point c (<= U+10FFFF) as 1..4 UTF-8 bytes at out */
static size_t trn__utf8_encode(uint32_t c, char *out) {
    if (c < 0x80) { out[0] = (char)c; return 1; }
    if (c < 0x800) { out[0] = (char)(0xC0 | (c >> 6)); out[1] = (char)(0x80 | (c & 0x3F)); return 2; }
    if (c < 0x10000) {
        out[0] = (char)(0xE0 | (c >> 12)); out[1] = (char)(0x80 | ((c >> 6) & 0x3F));
        out[2] = (char)(0x80 | (c & 0x3F)); return 3;
    }
    out[0] = (char)(0xF0 | (c >> 18)); out[1] = (char)(0x80 | ((c >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((c >> 6) & 0x3F)); out[3] = (char)(0x80 | (c & 0x3F));
    return 4;
}

/* is the NUL-terminated s valid UTF-8? */
static int trn__utf8_valid(const char *s) {
    const unsigned char *p = (const unsigned char *)s, *end = p + strlen(s);
    while (p < end) {
        uint32_t cp;
        p += trn__utf8_decode(p, (size_t)(end - p), &cp);
        if (cp == TRN__NO_CHAR) return 0;
    }
    return 1;
}

/* --- the cursor ------------------------------------------------------
   j->p walks the text s[0..end). Decoded strings (trn__jstring) go to
   pool, which the caller sizes as the text plus one: a decoded string is
   never longer than its quoted source. Errors name the file and the byte
   ("what at byte N", N counted from `base`). */
typedef struct trn__jp {
    const char *s, *p, *end; /* text, cursor, one past the end */
    char *pool;              /* where trn__jstring decodes to, or NULL */
    size_t pool_used;
    const char *path;        /* for messages */
    const char *what;        /* "bad JSON", "bad safetensors header" */
    size_t base;             /* added to byte offsets in messages */
} trn__jp;

static void trn__jp_init(trn__jp *j, const char *s, size_t n, const char *path, const char *what, size_t base) {
    memset(j, 0, sizeof *j);
    j->s = j->p = s;
    j->end = s + n;
    j->path = path;
    j->what = what;
    j->base = base;
}

static trn_result trn__jerr(trn__jp *j, const char *msg) {
    return trn_fail(TRN_ERR_FORMAT, "%s: %s at byte %zu: %s", j->path, j->what, (size_t)(j->p - j->s) + j->base, msg);
}

static void trn__jws(trn__jp *j) {
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r')) j->p++;
}

/* after whitespace, is the next character c? (consumes it if so) */
static int trn__jeat(trn__jp *j, char c) {
    trn__jws(j);
    if (j->p < j->end && *j->p == c) { j->p++; return 1; }
    return 0;
}

static int trn__jhex4(const char *p, const char *end, uint32_t *out) {
    uint32_t v = 0;
    int i;
    if (end - p < 4) return 0;
    for (i = 0; i < 4; i++) {
        char c = p[i];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (uint32_t)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (uint32_t)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (uint32_t)(c - 'A' + 10);
        else return 0;
    }
    *out = v;
    return 1;
}

#define TRN__JSTR_END 0xFFFFFFFEu /* trn__jchar: the closing quote */

/* the next character of a string (the cursor is past its opening quote):
   raw UTF-8 or an escape, \uD83D\uDE00 pairs joined into U+1F600. Sets
   *cp, or TRN__JSTR_END after consuming the closing quote. \u0000 comes
   back as 0: callers that keep C strings refuse it. */
static trn_result trn__jchar(trn__jp *j, uint32_t *cp) {
    uint32_t lo;
    if (j->p >= j->end) return trn__jerr(j, "unterminated string");
    if (*j->p == '"') { j->p++; *cp = TRN__JSTR_END; return TRN_OK; }
    if ((unsigned char)*j->p < 0x20) return trn__jerr(j, "control character inside a string");
    if (*j->p != '\\') {
        size_t w = trn__utf8_decode((const unsigned char *)j->p, (size_t)(j->end - j->p), cp);
        if (*cp == TRN__NO_CHAR) return trn__jerr(j, "invalid UTF-8 in a string");
        j->p += w;
        return TRN_OK;
    }
    if (j->end - j->p < 2) return trn__jerr(j, "unterminated escape");
    switch (j->p[1]) {
    case '"': *cp = '"'; break;
    case '\\': *cp = '\\'; break;
    case '/': *cp = '/'; break;
    case 'b': *cp = '\b'; break;
    case 'f': *cp = '\f'; break;
    case 'n': *cp = '\n'; break;
    case 'r': *cp = '\r'; break;
    case 't': *cp = '\t'; break;
    case 'u':
        if (!trn__jhex4(j->p + 2, j->end, cp)) return trn__jerr(j, "bad \\u escape");
        if (*cp >= 0xDC00 && *cp <= 0xDFFF) return trn__jerr(j, "unpaired UTF-16 surrogate in \\u escape");
        if (*cp >= 0xD800 && *cp <= 0xDBFF) { /* a high surrogate: its low half must follow */
            if (j->end - j->p < 12 || j->p[6] != '\\' || j->p[7] != 'u' || !trn__jhex4(j->p + 8, j->end, &lo) ||
                lo < 0xDC00 || lo > 0xDFFF)
                return trn__jerr(j, "unpaired UTF-16 surrogate in \\u escape");
            *cp = 0x10000 + ((*cp - 0xD800) << 10) + (lo - 0xDC00);
            j->p += 6;
        }
        j->p += 4;
        break;
    default: return trn__jerr(j, "unknown escape in a string");
    }
    j->p += 2;
    return TRN_OK;
}

/* after whitespace, the opening quote of a string */
static trn_result trn__jopen(trn__jp *j) {
    trn__jws(j);
    if (j->p >= j->end || *j->p != '"') return trn__jerr(j, "expected a string");
    j->p++;
    return TRN_OK;
}

/* a string at the cursor, decoded (UTF-8, NUL-terminated) into the pool */
static trn_result trn__jstring(trn__jp *j, const char **out) {
    char *start = j->pool + j->pool_used, *o = start;
    trn_result r = trn__jopen(j);
    for (;;) {
        uint32_t cp = 0;
        if (r != TRN_OK || (r = trn__jchar(j, &cp)) != TRN_OK) return r;
        if (cp == TRN__JSTR_END) break;
        if (cp == 0) return trn__jerr(j, "NUL character (\\u0000) in a string");
        o += trn__utf8_encode(cp, o);
    }
    *o++ = 0;
    j->pool_used = (size_t)(o - j->pool);
    *out = start;
    return TRN_OK;
}

/* an integer in [lo, hi]: -?(0|[1-9][0-9]*), no fraction, no exponent.
   Exact or refused: 32.7, 1e3 and 4294967298 for an int32 are errors. */
static trn_result trn__jint(trn__jp *j, int64_t lo, int64_t hi, int64_t *out) {
    uint64_t v = 0, lim;
    const char *start;
    char msg[120];
    int neg, big = 0;
    int64_t x;
    trn__jws(j);
    start = j->p;
    neg = j->p < j->end && *j->p == '-';
    j->p += neg;
    lim = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX; /* |int64| */
    while (j->p < j->end && *j->p >= '0' && *j->p <= '9') {
        uint64_t d = (uint64_t)(*j->p++ - '0');
        if (big || v > (lim - d) / 10) big = 1; /* past int64: outside any range */
        else v = v * 10 + d;
    }
    if (j->p == start + neg) return trn__jerr(j, "expected an integer");
    if (start[neg] == '0' && j->p - start - neg > 1) return trn__jerr(j, "number with a leading zero");
    if (j->p < j->end && (*j->p == '.' || *j->p == 'e' || *j->p == 'E'))
        return trn__jerr(j, "expected an integer, found a fraction or an exponent");
    x = !neg ? (int64_t)v : v > (uint64_t)INT64_MAX ? INT64_MIN : -(int64_t)v;
    if (big || x < lo || x > hi) {
        j->p = start;
        snprintf(msg, sizeof msg, "integer outside [%lld, %lld]", (long long)lo, (long long)hi);
        return trn__jerr(j, msg);
    }
    *out = x;
    return TRN_OK;
}

/* a non-negative integer (shapes, offsets) */
static trn_result trn__juint(trn__jp *j, uint64_t *out) {
    int64_t v = 0;
    trn_result r;
    trn__jws(j);
    if (j->p < j->end && *j->p == '-') return trn__jerr(j, "negative number where a size is expected");
    if ((r = trn__jint(j, 0, INT64_MAX, &v)) != TRN_OK) return r;
    *out = (uint64_t)v;
    return TRN_OK;
}

/* any value at the cursor, checked and passed over (depth: its nesting) */
static trn_result trn__jskip(trn__jp *j, int depth) {
    trn_result r;
    uint32_t cp = 0;
    trn__jws(j);
    if (depth > TRN__JSON_MAX_DEPTH) return trn__jerr(j, "JSON nested too deeply");
    if (j->p >= j->end) return trn__jerr(j, "unexpected end of the text");
    switch (*j->p) {
    case '"':
        j->p++;
        do {
            if ((r = trn__jchar(j, &cp)) != TRN_OK) return r;
        } while (cp != TRN__JSTR_END);
        return TRN_OK;
    case '{':
        j->p++;
        if (trn__jeat(j, '}')) return TRN_OK;
        for (;;) {
            trn__jws(j);
            if (j->p >= j->end || *j->p != '"') return trn__jerr(j, "expected a string (an object's key)");
            if ((r = trn__jskip(j, depth + 1)) != TRN_OK) return r;
            if (!trn__jeat(j, ':')) return trn__jerr(j, "expected ':'");
            if ((r = trn__jskip(j, depth + 1)) != TRN_OK) return r;
            if (trn__jeat(j, '}')) return TRN_OK;
            if (!trn__jeat(j, ',')) return trn__jerr(j, "expected ',' or '}'");
        }
    case '[':
        j->p++;
        if (trn__jeat(j, ']')) return TRN_OK;
        for (;;) {
            if ((r = trn__jskip(j, depth + 1)) != TRN_OK) return r;
            if (trn__jeat(j, ']')) return TRN_OK;
            if (!trn__jeat(j, ',')) return trn__jerr(j, "expected ',' or ']'");
        }
    case 't': case 'f': case 'n': {
        const char *lit = *j->p == 't' ? "true" : *j->p == 'f' ? "false" : "null";
        size_t n = strlen(lit);
        if ((size_t)(j->end - j->p) < n || memcmp(j->p, lit, n) != 0) return trn__jerr(j, "unknown literal");
        j->p += n;
        return TRN_OK;
    }
    default: { /* number: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? */
        const char *d;
        if (*j->p == '-') j->p++;
        d = j->p;
        while (j->p < j->end && *j->p >= '0' && *j->p <= '9') j->p++;
        if (j->p == d) return trn__jerr(j, "expected a value");
        if (*d == '0' && j->p - d > 1) return trn__jerr(j, "number with a leading zero");
        if (j->p < j->end && *j->p == '.') {
            d = ++j->p;
            while (j->p < j->end && *j->p >= '0' && *j->p <= '9') j->p++;
            if (j->p == d) return trn__jerr(j, "bad number");
        }
        if (j->p < j->end && (*j->p == 'e' || *j->p == 'E')) {
            j->p++;
            if (j->p < j->end && (*j->p == '+' || *j->p == '-')) j->p++;
            d = j->p;
            while (j->p < j->end && *j->p >= '0' && *j->p <= '9') j->p++;
            if (j->p == d) return trn__jerr(j, "bad number");
        }
        return TRN_OK;
    }
    }
}

/* <<json implementation end */

/* >>checkpoint implementation */
/* ========================================================================
   >>checkpoint
   Four layers, bottom up:
     1. CRC-32C and a few string helpers (UTF-8 check, JSON escaping)
     2. the header parser: a small JSON reader that checks everything the
        safetensors format promises (bounds, sizes, tiling of the data)
     3. the writer: header, then tensors streamed through one staging
        buffer, into "<path>.tmp.<pid>"; fsync; rename; fsync the directory
     4. training-state checkpoints and run directories on top of 2 and 3
   Test hook: TRN_CKPT_TEST_DELAY_MS=<ms> sleeps after each tensor written,
   so a test can kill -9 a process in the middle of a save.
   ======================================================================== */
#if defined(__SSE4_2__) && defined(__x86_64__)
#include <nmmintrin.h>
#endif

#define TRN__ST_MAX_HEADER 100000000u /* the Python package's limit, 100 MB  */
static size_t trn__st_staging = (size_t)4 << 20; /* staging buffer, bytes */

/* --- CRC-32C: polynomial 0x1EDC6F41 (reflected: 0x82F63B78) --------------
   One table lookup per byte; the SSE4.2 crc32 instruction computes the same
   function 8 bytes at a time. crc(0, "123456789") = 0xE3069283. */
static uint32_t trn__crc_table[256];
static int trn__crc_ready;

static uint32_t trn__crc32c_sw(uint32_t crc, const void *data, size_t n) {
    const unsigned char *p = (const unsigned char *)data;
    if (!trn__crc_ready) {
        uint32_t i, k, c;
        for (i = 0; i < 256; i++) {
            for (c = i, k = 0; k < 8; k++) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
            trn__crc_table[i] = c;
        }
        trn__crc_ready = 1;
    }
    crc = ~crc;
    while (n--) crc = trn__crc_table[(crc ^ *p++) & 0xffu] ^ (crc >> 8);
    return ~crc;
}

TRNDEF uint32_t trn_crc32c(uint32_t crc, const void *data, size_t n) {
#if defined(__SSE4_2__) && defined(__x86_64__)
    const unsigned char *p = (const unsigned char *)data;
    uint64_t c = ~crc;
    while (n && ((uintptr_t)p & 7u)) { c = _mm_crc32_u8((uint32_t)c, *p++); n--; }
    while (n >= 8) { uint64_t w; memcpy(&w, p, 8); c = _mm_crc32_u64(c, w); p += 8; n -= 8; }
    while (n--) c = _mm_crc32_u8((uint32_t)c, *p++);
    (void)trn__crc32c_sw; /* the table version stays: tests compare the two */
    return ~(uint32_t)c;
#else
    return trn__crc32c_sw(crc, data, n);
#endif
}

static int trn__little_endian(void) {
    const uint16_t one = 1;
    unsigned char b;
    memcpy(&b, &one, 1);
    return b == 1;
}

static const char *trn__shape64_str(char *buf, size_t n, int ndim, const int64_t *shape) {
    size_t k = 0;
    int i;
    buf[0] = 0;
    k += (size_t)snprintf(buf, n, "(");
    for (i = 0; i < ndim && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, i ? ",%lld" : "%lld", (long long)shape[i]);
    if (k < n) snprintf(buf + k, n - k, ")");
    return buf;
}

/* --- trn_meta --------------------------------------------------------- */
static int trn__meta_find(const trn_meta *meta, const char *key) {
    int i;
    for (i = 0; i < meta->n; i++) if (strcmp(meta->key[i], key) == 0) return i;
    return -1;
}

/* the kit's own keys: written by the kit, never taken from or handed to the caller */
static int trn__meta_reserved(const char *key) {
    return strncmp(key, "trn.", 4) == 0 || strcmp(key, "format") == 0;
}

TRNDEF void trn_meta_set(trn_meta *meta, const char *key, const char *val) {
    int i;
    if (!meta || !key || !val) trn_fatal("trn_meta_set: NULL argument");
    if (!key[0] || strlen(key) >= TRN_META_KEY)
        trn_fatal("trn_meta_set: key '%.60s' must be 1..%d bytes", key, TRN_META_KEY - 1);
    if (strlen(val) >= TRN_META_VAL)
        trn_fatal("trn_meta_set %s: value of %zu bytes, at most %d fit", key, strlen(val), TRN_META_VAL - 1);
    i = trn__meta_find(meta, key);
    if (i < 0) {
        if (meta->n < 0 || meta->n >= TRN_META_MAX)
            trn_fatal("trn_meta_set %s: the table is full (%d keys)", key, TRN_META_MAX);
        i = meta->n++;
        strcpy(meta->key[i], key);
    }
    strcpy(meta->val[i], val);
}

TRNDEF void trn_meta_set_u64(trn_meta *meta, const char *key, uint64_t v) {
    char buf[32];
    snprintf(buf, sizeof buf, "%llu", (unsigned long long)v);
    trn_meta_set(meta, key, buf);
}

/* %.17g: 17 significant digits bring every double back exactly (and every
   float, through the double it widens to) */
TRNDEF void trn_meta_set_f64(trn_meta *meta, const char *key, double v) {
    char buf[40];
    snprintf(buf, sizeof buf, "%.17g", v);
    trn_meta_set(meta, key, buf);
}

TRNDEF const char *trn_meta_get(const trn_meta *meta, const char *key) {
    int i;
    if (!meta || !key) return NULL;
    i = trn__meta_find(meta, key);
    return i < 0 ? NULL : meta->val[i];
}

static trn_result trn__parse_u64(const char *s, uint64_t *out) {
    uint64_t v = 0;
    if (!s || !*s) return TRN_ERR_FORMAT;
    for (; *s; s++) {
        if (*s < '0' || *s > '9') return TRN_ERR_FORMAT;
        if (v > (UINT64_MAX - (uint64_t)(*s - '0')) / 10) return TRN_ERR_FORMAT;
        v = v * 10 + (uint64_t)(*s - '0');
    }
    *out = v;
    return TRN_OK;
}

TRNDEF trn_result trn_meta_get_u64(const trn_meta *meta, const char *key, uint64_t *out) {
    const char *s = trn_meta_get(meta, key);
    if (!s) return trn_fail(TRN_ERR_MISMATCH, "metadata has no key '%s'", key ? key : "(null)");
    if (trn__parse_u64(s, out) != TRN_OK)
        return trn_fail(TRN_ERR_FORMAT, "metadata '%s' = '%.60s' is not an unsigned integer", key, s);
    return TRN_OK;
}

TRNDEF trn_result trn_meta_get_f64(const trn_meta *meta, const char *key, double *out) {
    const char *s = trn_meta_get(meta, key);
    char *end;
    if (!s) return trn_fail(TRN_ERR_MISMATCH, "metadata has no key '%s'", key ? key : "(null)");
    errno = 0;
    *out = strtod(s, &end);
    if (!*s || *end || (errno == ERANGE && fabs(*out) > 1.0))
        return trn_fail(TRN_ERR_FORMAT, "metadata '%s' = '%.60s' is not a number", key, s);
    return TRN_OK;
}

/* --- the header parser -------------------------------------------------
   The header is JSON, read with the kit's one reader (>>json): strings
   with every escape, numbers, true, false, null, nesting. Decoded strings
   go to one pool as large as the header. Fields of a tensor other than
   dtype, shape and data_offsets are checked and skipped. */
/* the dtypes of the safetensors format and their sizes */
static const struct { const char *name; int size; } trn__st_dtypes[] = {
    {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"F64", 8}, {"I64", 8}, {"I32", 4}, {"I16", 2},
    {"I8", 1}, {"U64", 8}, {"U32", 4}, {"U16", 2}, {"U8", 1}, {"BOOL", 1},
    {"F8_E4M3", 1}, {"F8_E5M2", 1}};

/* one tensor's object: {"dtype": .., "shape": [..], "data_offsets": [b, e], other: skipped} */
static trn_result trn__jtensor(trn__jp *j, trn_st_tensor *t) {
    int have_dtype = 0, have_shape = 0, have_offsets = 0;
    trn_result r;
    char msg[160];
    if (!trn__jeat(j, '{')) return trn__jerr(j, "a tensor entry must be an object");
    if (!trn__jeat(j, '}')) {
        for (;;) {
            size_t mark = j->pool_used;
            const char *key, *val;
            if ((r = trn__jstring(j, &key)) != TRN_OK) return r;
            if (!trn__jeat(j, ':')) return trn__jerr(j, "expected ':'");
            if (strcmp(key, "dtype") == 0) {
                size_t i;
                if (have_dtype++) return trn__jerr(j, "dtype given twice");
                if ((r = trn__jstring(j, &val)) != TRN_OK) return r;
                for (i = 0; i < sizeof trn__st_dtypes / sizeof trn__st_dtypes[0]; i++)
                    if (strcmp(val, trn__st_dtypes[i].name) == 0) break;
                if (i == sizeof trn__st_dtypes / sizeof trn__st_dtypes[0]) {
                    snprintf(msg, sizeof msg, "tensor '%.60s': unknown dtype '%.20s'", t->name, val);
                    return trn__jerr(j, msg);
                }
                t->dtype = trn__st_dtypes[i].name;
                t->dtype_size = trn__st_dtypes[i].size;
            } else if (strcmp(key, "shape") == 0) {
                if (have_shape++) return trn__jerr(j, "shape given twice");
                if (!trn__jeat(j, '[')) return trn__jerr(j, "shape must be an array");
                if (!trn__jeat(j, ']')) {
                    for (;;) {
                        uint64_t d = 0;
                        if (t->ndim == TRN_ST_MAX_DIMS) {
                            snprintf(msg, sizeof msg, "tensor '%.60s' has more than %d dims", t->name, TRN_ST_MAX_DIMS);
                            return trn__jerr(j, msg);
                        }
                        if ((r = trn__juint(j, &d)) != TRN_OK) return r;
                        t->shape[t->ndim++] = (int64_t)d;
                        if (trn__jeat(j, ']')) break;
                        if (!trn__jeat(j, ',')) return trn__jerr(j, "expected ',' or ']' in shape");
                    }
                }
            } else if (strcmp(key, "data_offsets") == 0) {
                if (have_offsets++) return trn__jerr(j, "data_offsets given twice");
                if (!trn__jeat(j, '[')) return trn__jerr(j, "data_offsets must be an array");
                if ((r = trn__juint(j, &t->begin)) != TRN_OK) return r;
                if (!trn__jeat(j, ',')) return trn__jerr(j, "data_offsets must hold two numbers");
                if ((r = trn__juint(j, &t->end)) != TRN_OK) return r;
                if (!trn__jeat(j, ']')) return trn__jerr(j, "data_offsets must hold two numbers");
            } else if ((r = trn__jskip(j, 2)) != TRN_OK) {
                return r;
            }
            j->pool_used = mark; /* the key (and dtype string) are not kept */
            if (trn__jeat(j, '}')) break;
            if (!trn__jeat(j, ',')) return trn__jerr(j, "expected ',' or '}'");
        }
    }
    if (!have_dtype || !have_shape || !have_offsets) {
        snprintf(msg, sizeof msg, "tensor '%.60s' lacks %s", t->name,
                 !have_dtype ? "dtype" : !have_shape ? "shape" : "data_offsets");
        return trn__jerr(j, msg);
    }
    return TRN_OK;
}

static int trn__st_cmp_offset(const void *a, const void *b) {
    const trn_st_tensor *x = (const trn_st_tensor *)a, *y = (const trn_st_tensor *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return strcmp(x->name, y->name);
}

static int trn__cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

typedef struct trn__kv { const char *k, *v; } trn__kv;
static int trn__cmp_kv(const void *a, const void *b) {
    return strcmp(((const trn__kv *)a)->k, ((const trn__kv *)b)->k);
}

/* grow an array of `size`-byte items to hold at least n+1 (TEMP memory) */
static int trn__grow(void **arr, int *cap, int n, size_t size) {
    void *q;
    int c;
    if (n < *cap) return 1;
    if (*cap > (1 << 28)) return 0;
    c = *cap ? 2 * *cap : 16;
    q = trn_alloc((size_t)c * size, TRN_KIND_TEMP);
    if (!q) return 0;
    if (*arr) memcpy(q, *arr, (size_t)n * size);
    trn_free(*arr);
    *arr = q;
    *cap = c;
    return 1;
}

/* The CRC of a header is computed over its content, not its bytes:
   metadata pairs sorted by key (trn.crc32c itself left out), then each
   tensor in data order (name, dtype, ndim, shape, offsets). */
static uint32_t trn__st_header_crc(const trn_safetensors *f) {
    uint32_t crc = 0;
    int i, k;
    for (i = 0; i < f->n_meta; i++) {
        if (strcmp(f->meta_key[i], "trn.crc32c") == 0) continue;
        crc = trn_crc32c(crc, f->meta_key[i], strlen(f->meta_key[i]) + 1);
        crc = trn_crc32c(crc, f->meta_val[i], strlen(f->meta_val[i]) + 1);
    }
    for (i = 0; i < f->n_tensors; i++) {
        const trn_st_tensor *t = &f->tensors[i];
        uint64_t v[3 + TRN_ST_MAX_DIMS];
        v[0] = (uint64_t)t->ndim; v[1] = t->begin; v[2] = t->end;
        for (k = 0; k < t->ndim; k++) v[3 + k] = (uint64_t)t->shape[k];
        crc = trn_crc32c(crc, t->name, strlen(t->name) + 1);
        crc = trn_crc32c(crc, t->dtype, strlen(t->dtype) + 1);
        crc = trn_crc32c(crc, v, sizeof(uint64_t) * (size_t)(3 + t->ndim));
    }
    return crc;
}

TRNDEF void trn_safetensors_close(trn_safetensors *f) {
    if (!f) return;
    if (f->fp) fclose(f->fp);
    trn_free(f->tensors);
    trn_free((void *)f->meta_key);
    trn_free((void *)f->meta_val);
    trn_free(f->pool);
    memset(f, 0, sizeof *f);
}

/* Parse header text hdr[0..n) of a file whose data section has data_len
   bytes, into f (f->path set, the rest zero). Validates everything. */
static trn_result trn__st_parse(trn_safetensors *f, const char *hdr, size_t n, uint64_t data_len) {
    trn__jp j;
    trn_result r;
    int cap_t = 0, cap_m = 0, seen_meta = 0, i, k;
    const char **names = NULL;
    uint64_t expect = 0, max_end = 0;
    char msg[200];
    trn__jp_init(&j, hdr, n, f->path, "bad safetensors header", 8); /* offsets count the 8-byte length */
    f->data_len = data_len;
    f->pool = (char *)trn_alloc(n + 1, TRN_KIND_TEMP);
    if (!f->pool) return trn_fail(TRN_ERR_NOMEM, "%s: header: %s", f->path, trn_error_reason());
    j.pool = f->pool;

    if (!trn__jeat(&j, '{')) return trn__jerr(&j, "the header must be a JSON object");
    if (!trn__jeat(&j, '}')) {
        for (;;) {
            const char *key;
            if ((r = trn__jstring(&j, &key)) != TRN_OK) return r;
            if (!trn__jeat(&j, ':')) return trn__jerr(&j, "expected ':'");
            if (strcmp(key, "__metadata__") == 0) {
                if (seen_meta++) return trn__jerr(&j, "__metadata__ given twice");
                trn__jws(&j);
                if (j.end - j.p >= 4 && memcmp(j.p, "null", 4) == 0) {
                    j.p += 4;
                } else {
                    if (!trn__jeat(&j, '{')) return trn__jerr(&j, "__metadata__ must be an object");
                    if (!trn__jeat(&j, '}')) {
                        for (;;) {
                            const char *mk, *mv, *raw;
                            int cap_v = cap_m;
                            if ((r = trn__jstring(&j, &mk)) != TRN_OK) return r;
                            if (!trn__jeat(&j, ':')) return trn__jerr(&j, "expected ':'");
                            trn__jws(&j);
                            raw = j.p + 1; /* where the value's characters start */
                            if (j.p < j.end && *j.p != '"') return trn__jerr(&j, "__metadata__ values must be strings");
                            if ((r = trn__jstring(&j, &mv)) != TRN_OK) return r;
                            if (!trn__grow((void **)&f->meta_key, &cap_m, f->n_meta, sizeof(char *)) ||
                                !trn__grow((void **)&f->meta_val, &cap_v, f->n_meta, sizeof(char *)))
                                return trn_fail(TRN_ERR_NOMEM, "%s: header: %s", f->path, trn_error_reason());
                            f->meta_key[f->n_meta] = mk;
                            f->meta_val[f->n_meta++] = mv;
                            if (strcmp(mk, "trn.crc32c") == 0) {
                                uint32_t v = 0;
                                /* exactly 8 hex digits, unescaped, so a writer can patch them in place */
                                if (j.p - raw != 9 || strlen(mv) != 8) return trn__jerr(&j, "trn.crc32c must be 8 hex digits");
                                for (k = 0; k < 8; k++) {
                                    char c = mv[k];
                                    int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
                                    if (d < 0) return trn__jerr(&j, "trn.crc32c must be 8 lowercase hex digits");
                                    v = (v << 4) | (uint32_t)d;
                                }
                                f->has_crc = 1;
                                f->crc_stored = v;
                                f->crc_pos = (size_t)(raw - hdr);
                            }
                            if (trn__jeat(&j, '}')) break;
                            if (!trn__jeat(&j, ',')) return trn__jerr(&j, "expected ',' or '}'");
                        }
                    }
                }
            } else {
                trn_st_tensor *t;
                if (!trn__grow((void **)&f->tensors, &cap_t, f->n_tensors, sizeof(trn_st_tensor)))
                    return trn_fail(TRN_ERR_NOMEM, "%s: header: %s", f->path, trn_error_reason());
                t = &f->tensors[f->n_tensors++];
                memset(t, 0, sizeof *t);
                t->name = key;
                if ((r = trn__jtensor(&j, t)) != TRN_OK) return r;
            }
            if (trn__jeat(&j, '}')) break;
            if (!trn__jeat(&j, ',')) return trn__jerr(&j, "expected ',' or '}'");
        }
    }
    trn__jws(&j); /* the padding */
    if (j.p != j.end) return trn__jerr(&j, "characters after the header object");

    /* sizes: numel = prod(shape), bytes = numel * dtype size, no overflow */
    for (i = 0; i < f->n_tensors; i++) {
        trn_st_tensor *t = &f->tensors[i];
        uint64_t numel = 1;
        int zero = 0;
        for (k = 0; k < t->ndim; k++) zero |= t->shape[k] == 0;
        for (k = 0; k < t->ndim && !zero; k++) {
            if (numel > UINT64_MAX / (uint64_t)t->shape[k]) {
                return trn_fail(TRN_ERR_FORMAT, "%s: tensor '%.60s': shape %s is too large", f->path, t->name,
                                trn__shape64_str(msg, sizeof msg, t->ndim, t->shape));
            }
            numel *= (uint64_t)t->shape[k];
        }
        t->numel = zero ? 0 : numel;
        if (t->numel > (UINT64_MAX >> 4))
            return trn_fail(TRN_ERR_FORMAT, "%s: tensor '%.60s': shape %s is too large", f->path, t->name,
                            trn__shape64_str(msg, sizeof msg, t->ndim, t->shape));
        if (t->end < t->begin || t->end - t->begin != t->numel * (uint64_t)t->dtype_size)
            return trn_fail(TRN_ERR_FORMAT,
                            "%s: tensor '%.60s': data_offsets [%llu, %llu] do not hold %s %s (%llu bytes)",
                            f->path, t->name, (unsigned long long)t->begin, (unsigned long long)t->end,
                            trn__shape64_str(msg, sizeof msg, t->ndim, t->shape), t->dtype,
                            (unsigned long long)(t->numel * (uint64_t)t->dtype_size));
        if (t->end > max_end) max_end = t->end;
    }
    if (max_end > data_len)
        return trn_fail(TRN_ERR_FORMAT, "%s: truncated: the header describes %llu bytes of data, the file holds %llu",
                        f->path, (unsigned long long)max_end, (unsigned long long)data_len);

    /* the tensors must tile the data section: sorted by offset, each one
       starts where the previous one ended, the last ends at the file's end */
    if (f->n_tensors > 1) qsort(f->tensors, (size_t)f->n_tensors, sizeof(trn_st_tensor), trn__st_cmp_offset);
    for (i = 0; i < f->n_tensors; i++) {
        const trn_st_tensor *t = &f->tensors[i];
        if (t->begin < expect)
            return trn_fail(TRN_ERR_FORMAT, "%s: tensors '%.60s' and '%.60s' overlap in the data section", f->path,
                            f->tensors[i - 1].name, t->name);
        if (t->begin > expect)
            return trn_fail(TRN_ERR_FORMAT, "%s: %llu unused bytes before tensor '%.60s' in the data section", f->path,
                            (unsigned long long)(t->begin - expect), t->name);
        expect = t->end;
    }
    if (expect != data_len)
        return trn_fail(TRN_ERR_FORMAT, "%s: %llu bytes after the last tensor (the data section must end there)",
                        f->path, (unsigned long long)(data_len - expect));

    /* unique names and keys */
    if (f->n_tensors > 1 || f->n_meta > 1) {
        names = (const char **)trn_alloc(sizeof(char *) * (size_t)TRN__MAX(f->n_tensors, 1), TRN_KIND_TEMP);
        if (!names) return trn_fail(TRN_ERR_NOMEM, "%s: header: %s", f->path, trn_error_reason());
        for (i = 0; i < f->n_tensors; i++) names[i] = f->tensors[i].name;
        qsort((void *)names, (size_t)f->n_tensors, sizeof(char *), trn__cmp_str);
        for (i = 1; i < f->n_tensors; i++)
            if (strcmp(names[i - 1], names[i]) == 0) break;
        if (i < f->n_tensors) {
            r = trn_fail(TRN_ERR_FORMAT, "%s: tensor '%.60s' appears twice in the header", f->path, names[i]);
            trn_free((void *)names);
            return r;
        }
        /* metadata: sort the pairs by key (the CRC walks them in that order) */
        if (f->n_meta > 1) {
            trn__kv *kv = (trn__kv *)trn_alloc(sizeof(trn__kv) * (size_t)f->n_meta, TRN_KIND_TEMP);
            if (!kv) {
                trn_free((void *)names);
                return trn_fail(TRN_ERR_NOMEM, "%s: header: %s", f->path, trn_error_reason());
            }
            for (i = 0; i < f->n_meta; i++) { kv[i].k = f->meta_key[i]; kv[i].v = f->meta_val[i]; }
            qsort(kv, (size_t)f->n_meta, sizeof(trn__kv), trn__cmp_kv);
            for (i = 0; i < f->n_meta; i++) { f->meta_key[i] = kv[i].k; f->meta_val[i] = kv[i].v; }
            trn_free(kv);
            for (i = 1; i < f->n_meta; i++)
                if (strcmp(f->meta_key[i - 1], f->meta_key[i]) == 0) {
                    trn_free((void *)names);
                    return trn_fail(TRN_ERR_FORMAT, "%s: metadata key '%.60s' appears twice", f->path, f->meta_key[i]);
                }
        }
        trn_free((void *)names);
    }
    if (!f->has_crc && trn_safetensors_meta(f, "trn.version"))
        return trn_fail(TRN_ERR_FORMAT, "%s: written by train.h but its trn.crc32c is missing", f->path);
    if (f->has_crc) f->crc_header = trn__st_header_crc(f);
    return TRN_OK;
}

/* open on a stdio stream (the fuzzer passes a memory stream); takes fp */
static trn_result trn__st_open_fp(trn_safetensors *f, FILE *fp, const char *path) {
    unsigned char len8[8];
    uint64_t n = 0;
    long long size;
    char *hdr;
    trn_result r;
    int i;
    memset(f, 0, sizeof *f);
    snprintf(f->path, sizeof f->path, "%s", path);
    f->fp = fp;
    if (!trn__little_endian()) {
        trn_safetensors_close(f);
        return trn_fail(TRN_ERR_INVALID, "%s: safetensors on a big-endian host is not supported", path);
    }
    if (fileno(fp) >= 0) {
        struct stat st;
        if (fstat(fileno(fp), &st) == 0 && S_ISDIR(st.st_mode)) {
            trn_safetensors_close(f);
            return trn_fail(TRN_ERR_IO, "open %s: is a directory", path);
        }
    }
    if (fseeko(fp, 0, SEEK_END) != 0 || (size = (long long)ftello(fp)) < 0 || fseeko(fp, 0, SEEK_SET) != 0) {
        r = trn_fail(TRN_ERR_IO, "%s: cannot find the file size: %s", path, strerror(errno));
        trn_safetensors_close(f);
        return r;
    }
    if (size < 8 || fread(len8, 1, 8, fp) != 8) {
        trn_safetensors_close(f);
        return trn_fail(TRN_ERR_FORMAT, "%s: not a safetensors file (%lld bytes, too short for the header length)",
                        path, size);
    }
    for (i = 7; i >= 0; i--) n = (n << 8) | len8[i];
    if (n > (uint64_t)size - 8) {
        trn_safetensors_close(f);
        return trn_fail(TRN_ERR_FORMAT, "%s: not a safetensors file, or truncated: header length %llu, file size %lld",
                        path, (unsigned long long)n, size);
    }
    if (n > TRN__ST_MAX_HEADER || n < 2) {
        trn_safetensors_close(f);
        return trn_fail(TRN_ERR_FORMAT, "%s: not a safetensors file: header length %llu (must be 2..%u)", path,
                        (unsigned long long)n, TRN__ST_MAX_HEADER);
    }
    hdr = (char *)trn_alloc((size_t)n, TRN_KIND_TEMP);
    if (!hdr) {
        r = trn_fail(TRN_ERR_NOMEM, "%s: header: %s", path, trn_error_reason());
        trn_safetensors_close(f);
        return r;
    }
    if (fread(hdr, 1, (size_t)n, fp) != (size_t)n) {
        r = trn_fail(TRN_ERR_IO, "%s: read error in the header", path);
    } else if (hdr[0] != '{') {
        r = trn_fail(TRN_ERR_FORMAT, "%s: not a safetensors file (the header does not start with '{')", path);
    } else {
        f->header_len = n;
        f->data_start = 8 + n;
        r = trn__st_parse(f, hdr, (size_t)n, (uint64_t)size - 8 - n);
    }
    trn_free(hdr);
    if (r != TRN_OK) trn_safetensors_close(f);
    return r;
}

TRNDEF trn_result trn_check_regular(const char *path) {
    struct stat st;
    const char *what;
    int e;
    if (!path) return trn_fail(TRN_ERR_INVALID, "trn_check_regular: NULL path");
    if (stat(path, &st) != 0) {
        e = errno;
        trn_fail(TRN_ERR_IO, "%s: %s", path, strerror(e));
        errno = e;
        return TRN_ERR_IO;
    }
    if (S_ISREG(st.st_mode)) return TRN_OK;
    what = S_ISDIR(st.st_mode) ? "a directory" : S_ISFIFO(st.st_mode) ? "a FIFO" : S_ISCHR(st.st_mode) ? "a character device"
         : S_ISBLK(st.st_mode) ? "a block device" : S_ISSOCK(st.st_mode) ? "a socket" : "not a file";
    errno = EINVAL;
    return trn_fail(TRN_ERR_IO, "%s: %s, not a regular file", path, what);
}

TRNDEF trn_result trn_safetensors_open(trn_safetensors *f, const char *path) {
    FILE *fp;
    if (!f || !path) return trn_fail(TRN_ERR_INVALID, "trn_safetensors_open: NULL argument");
    memset(f, 0, sizeof *f);
    if (trn_check_regular(path) != TRN_OK) return trn_fail(TRN_ERR_IO, "open %s", trn_error_reason());
    fp = fopen(path, "rb");
    if (!fp) return trn_fail(TRN_ERR_IO, "open %s: %s", path, strerror(errno));
    return trn__st_open_fp(f, fp, path);
}

TRNDEF const trn_st_tensor *trn_safetensors_find(const trn_safetensors *f, const char *name) {
    int i;
    if (!f || !name) return NULL;
    for (i = 0; i < f->n_tensors; i++) if (strcmp(f->tensors[i].name, name) == 0) return &f->tensors[i];
    return NULL;
}

TRNDEF const char *trn_safetensors_meta(const trn_safetensors *f, const char *key) {
    int i;
    if (!f || !key) return NULL;
    for (i = 0; i < f->n_meta; i++) if (strcmp(f->meta_key[i], key) == 0) return f->meta_val[i];
    return NULL;
}

/* read n bytes at offset off of the data section */
static trn_result trn__st_read_at(trn_safetensors *f, uint64_t off, void *dst, size_t n) {
    if (fseeko(f->fp, (off_t)(f->data_start + off), SEEK_SET) != 0)
        return trn_fail(TRN_ERR_IO, "%s: seek: %s", f->path, strerror(errno));
    if (n && fread(dst, 1, n, f->fp) != n)
        return trn_fail(TRN_ERR_IO, "%s: read failed at data byte %llu (%s)", f->path, (unsigned long long)off,
                        ferror(f->fp) ? strerror(errno) : "the file got shorter since it was opened");
    return TRN_OK;
}

/* half -> float, exactly (every f16 value, subnormals, inf and NaN included) */
static float trn__f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1Fu, mant = h & 0x3FFu, bits;
    float out;
    if (e == 0x1F) bits = sign | 0x7F800000u | (mant << 13);
    else if (e) bits = sign | ((e + 112u) << 23) | (mant << 13);
    else if (!mant) bits = sign;
    else { /* subnormal: mant * 2^-24; shift the leading 1 up to the hidden bit */
        e = 113;
        while (!(mant & 0x400u)) { mant <<= 1; e--; }
        bits = sign | (e << 23) | ((mant & 0x3FFu) << 13);
    }
    memcpy(&out, &bits, 4);
    return out;
}

/* 2-byte elements, read into the upper half of dst, widen in place from the
   front: element i is written at bytes [4i, 4i+4), below every source
   element it has not read yet (source j sits at 2n + 2j >= 4i + 2) */
static void trn__st_widen(float *dst, size_t n, const char *dtype) {
    const unsigned char *src = (const unsigned char *)dst + 2 * n;
    size_t i;
    int bf = strcmp(dtype, "BF16") == 0;
    for (i = 0; i < n; i++) {
        uint16_t h = (uint16_t)(src[2 * i] | (src[2 * i + 1] << 8));
        dst[i] = bf ? trn__bf16_to_f32(h) : trn__f16_to_f32(h);
    }
}

static int trn__st_is_float(const trn_st_tensor *t) {
    return strcmp(t->dtype, "F32") == 0 || strcmp(t->dtype, "F16") == 0 || strcmp(t->dtype, "BF16") == 0;
}

TRNDEF trn_result trn_safetensors_read(trn_safetensors *f, const trn_st_tensor *t, float *host_dst) {
    trn_result r;
    if (!f || !f->fp || !t || (!host_dst && t->numel))
        return trn_fail(TRN_ERR_INVALID, "trn_safetensors_read: NULL argument");
    if (!trn__st_is_float(t))
        return trn_fail(TRN_ERR_FORMAT, "%s: tensor '%s' is %s; only F32, F16 and BF16 read as floats", f->path,
                        t->name, t->dtype);
    if (t->numel > SIZE_MAX / 4) return trn_fail(TRN_ERR_NOMEM, "%s: tensor '%s' is too large", f->path, t->name);
    if (t->dtype_size == 4) return trn__st_read_at(f, t->begin, host_dst, (size_t)(t->end - t->begin));
    r = trn__st_read_at(f, t->begin, (char *)host_dst + 2 * t->numel, (size_t)(t->end - t->begin));
    if (r == TRN_OK) trn__st_widen(host_dst, (size_t)t->numel, t->dtype);
    return r;
}

static trn_result trn__st_crc_check(trn_safetensors *f, uint32_t crc) {
    if (f->has_crc && crc != f->crc_stored)
        return trn_fail(TRN_ERR_CHECKSUM, "%s: checksum mismatch (stored %08x, computed %08x): the file is corrupt",
                        f->path, (unsigned)f->crc_stored, (unsigned)crc);
    return TRN_OK;
}

TRNDEF trn_result trn_safetensors_verify(trn_safetensors *f) {
    uint64_t off = 0;
    uint32_t crc;
    size_t cap;
    char *buf;
    trn_result r = TRN_OK;
    if (!f || !f->fp) return trn_fail(TRN_ERR_INVALID, "trn_safetensors_verify: file not open");
    if (!f->has_crc) return TRN_OK;
    cap = (size_t)TRN__MIN((uint64_t)trn__st_staging, TRN__MAX(f->data_len, 1));
    buf = (char *)trn_alloc(cap, TRN_KIND_TEMP);
    if (!buf) return trn_fail(TRN_ERR_NOMEM, "%s: verify: %s", f->path, trn_error_reason());
    crc = f->crc_header;
    while (off < f->data_len && r == TRN_OK) {
        size_t n = (size_t)TRN__MIN((uint64_t)cap, f->data_len - off);
        r = trn__st_read_at(f, off, buf, n);
        crc = trn_crc32c(crc, buf, n);
        off += n;
    }
    trn_free(buf);
    return r ? r : trn__st_crc_check(f, crc);
}

/* --- loading into a model ----------------------------------------------
   First every check that needs only the header (names, shapes, dtypes),
   so a wrong file leaves the model untouched; then one sequential pass
   over the data section: each chunk is read into the staging buffer,
   added to the CRC, widened if F16/BF16, and uploaded to its place. */
static int trn__st_shape_eq(const trn_st_tensor *e, int ndim, const int *shape) {
    int i;
    if (e->ndim != ndim) return 0;
    for (i = 0; i < ndim; i++) if (e->shape[i] != (int64_t)shape[i]) return 0;
    return 1;
}

static trn_result trn__st_shape_mismatch(const trn_safetensors *f, const char *name, const trn_st_tensor *e,
                                         int ndim, const int *shape) {
    char a[160], b[160];
    int64_t s64[TRN_ST_MAX_DIMS];
    int i;
    for (i = 0; i < ndim && i < TRN_ST_MAX_DIMS; i++) s64[i] = shape[i];
    return trn_fail(TRN_ERR_MISMATCH, "%s: tensor '%s' has shape %s in the file but %s in the model", f->path, name,
                    trn__shape64_str(a, sizeof a, e->ndim, e->shape), trn__shape64_str(b, sizeof b, ndim, s64));
}

/* the header-only part: every parameter in the file with its shape, a
   float dtype, and nothing else there (but "optim.m"/"optim.v" when
   allow_moments) */
static trn_result trn__st_check_model(const trn_safetensors *f, trn_model *m, int allow_moments) {
    int i;
    for (i = 0; i < m->n_params; i++) {
        const trn_tensor *p = m->params[i];
        const trn_st_tensor *e = trn_safetensors_find(f, p->name);
        if (!e)
            return trn_fail(TRN_ERR_MISMATCH, "%s: the model's tensor '%s' is not in the file (%d tensors there): "
                            "a file of another model?", f->path, p->name, f->n_tensors);
        if (!trn__st_is_float(e))
            return trn_fail(TRN_ERR_MISMATCH, "%s: tensor '%s' is %s in the file; the model needs F32 (or F16/BF16)",
                            f->path, p->name, e->dtype);
        if (!trn__st_shape_eq(e, p->ndim, p->shape)) return trn__st_shape_mismatch(f, p->name, e, p->ndim, p->shape);
    }
    for (i = 0; i < f->n_tensors; i++) {
        const trn_st_tensor *e = &f->tensors[i];
        int is_mom = allow_moments && (strcmp(e->name, "optim.m") == 0 || strcmp(e->name, "optim.v") == 0);
        if (!is_mom && !trn_model_find(m, e->name))
            return trn_fail(TRN_ERR_MISMATCH, "%s: the file has tensor '%s' that the model lacks: a file of another model?",
                            f->path, e->name);
    }
    return TRN_OK;
}

/* the data pass; moments (may be NULL) receive "optim.m" / "optim.v" of
   n_mom floats each. Call trn__st_check_model first. */
static trn_result trn__st_load_into(trn_safetensors *f, trn_model *m, float *mom_m, float *mom_v, size_t n_mom) {
    const trn_backend *be = m->backend;
    uint64_t max_bytes = 0;
    size_t cap;
    uint32_t crc = f->crc_header;
    char *stage;
    trn_result r = TRN_OK;
    int i;
    for (i = 0; i < f->n_tensors; i++) {
        const trn_st_tensor *e = &f->tensors[i];
        if (mom_m && (strcmp(e->name, "optim.m") == 0 || strcmp(e->name, "optim.v") == 0) &&
            (strcmp(e->dtype, "F32") != 0 || e->ndim != 1 || e->shape[0] != (int64_t)n_mom))
            return trn_fail(TRN_ERR_FORMAT, "%s: tensor '%s' should be F32 (%zu)", f->path, e->name, n_mom);
        if (e->end - e->begin > max_bytes) max_bytes = e->end - e->begin;
    }
    cap = (size_t)TRN__MIN((uint64_t)trn__st_staging, TRN__MAX(2 * max_bytes, 64));
    cap &= ~(size_t)7;
    stage = (char *)trn_alloc(cap, TRN_KIND_TEMP);
    if (!stage) return trn_fail(TRN_ERR_NOMEM, "%s: staging: %s", f->path, trn_error_reason());
    if (fseeko(f->fp, (off_t)f->data_start, SEEK_SET) != 0) r = trn_fail(TRN_ERR_IO, "%s: seek: %s", f->path, strerror(errno));
    for (i = 0; i < f->n_tensors && r == TRN_OK; i++) {
        const trn_st_tensor *e = &f->tensors[i];
        const trn_tensor *p = trn_model_find(m, e->name);
        float *dst = p ? m->param_data + p->offset
                   : strcmp(e->name, "optim.m") == 0 ? mom_m : strcmp(e->name, "optim.v") == 0 ? mom_v : NULL;
        size_t per = cap / 4;      /* elements per chunk: their F32 form fits the buffer */
        uint64_t done = 0;
        while (done < e->numel) {
            size_t k = (size_t)TRN__MIN((uint64_t)per, e->numel - done);
            size_t raw = k * (size_t)e->dtype_size;
            char *into = stage + (e->dtype_size == 2 ? 2 * k : 0);
            if (fread(into, 1, raw, f->fp) != raw) {
                r = trn_fail(TRN_ERR_IO, "%s: read failed in tensor '%s': %s", f->path, e->name,
                             ferror(f->fp) ? strerror(errno) : "unexpected end of file");
                break;
            }
            crc = trn_crc32c(crc, into, raw);
            if (dst) {
                if (e->dtype_size == 2) trn__st_widen((float *)stage, k, e->dtype);
                be->upload(dst + done, stage, k * sizeof(float));
            }
            done += k;
        }
    }
    trn_free(stage);
    return r ? r : trn__st_crc_check(f, crc);
}

/* the caller's keys, from the file (kit keys left out) */
static trn_result trn__st_meta_out(const trn_safetensors *f, trn_meta *out) {
    int i;
    if (!out) return TRN_OK;
    memset(out, 0, sizeof *out);
    for (i = 0; i < f->n_meta; i++) {
        if (trn__meta_reserved(f->meta_key[i])) continue;
        if (out->n == TRN_META_MAX || !f->meta_key[i][0] || strlen(f->meta_key[i]) >= TRN_META_KEY || strlen(f->meta_val[i]) >= TRN_META_VAL)
            return trn_fail(TRN_ERR_FORMAT, "%s: metadata '%.60s' does not fit in a trn_meta (%d keys of < %d bytes, "
                            "values < %d bytes); pass NULL for meta", f->path, f->meta_key[i], TRN_META_MAX,
                            TRN_META_KEY, TRN_META_VAL);
        trn_meta_set(out, f->meta_key[i], f->meta_val[i]);
    }
    return TRN_OK;
}

TRNDEF trn_result trn_safetensors_load(const char *path, trn_model *m, trn_meta *meta_out) {
    trn_safetensors f;
    trn_result r;
    if (!path || !m || !m->param_data) return trn_fail(TRN_ERR_INVALID, "trn_safetensors_load: no path or model not allocated");
    trn_params_changed(m); /* bf16: the weights' copy follows the loaded master */
    if (m->shard.param_hi) /* >>sharding: FSDP keeps a slice of the weights */
        return trn_fail(TRN_ERR_INVALID, "trn_safetensors_load: this process holds a shard of the weights only (FSDP): "
                                         "use trn_ddp_checkpoint_load_sharded");
    if ((r = trn_safetensors_open(&f, path)) != TRN_OK) return r;
    r = trn__st_check_model(&f, m, 0);
    if (r == TRN_OK) r = trn__st_load_into(&f, m, NULL, NULL, 0);
    if (r == TRN_OK) r = trn__st_meta_out(&f, meta_out);
    trn_safetensors_close(&f);
    return r;
}

/* --- the writer ---------------------------------------------------------- */
typedef struct trn__sbuf { char *p; size_t n, cap; int oom; } trn__sbuf;

static void trn__sb_put(trn__sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? 2 * b->cap : 4096;
        char *q;
        while (cap < b->n + n + 1) cap *= 2;
        q = (char *)trn_alloc(cap, TRN_KIND_TEMP);
        if (!q) { b->oom = 1; return; }
        if (b->p) memcpy(q, b->p, b->n);
        trn_free(b->p);
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static void trn__sb_cat(trn__sbuf *b, const char *s) { trn__sb_put(b, s, strlen(s)); }

/* a JSON string: quote, backslash and control characters escaped */
static void trn__sb_json(trn__sbuf *b, const char *s) {
    trn__sb_put(b, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        char esc[8];
        if (c == '"' || c == '\\') { esc[0] = '\\'; esc[1] = (char)c; trn__sb_put(b, esc, 2); }
        else if (c < 0x20) { snprintf(esc, sizeof esc, "\\u%04x", c); trn__sb_put(b, esc, 6); }
        else trn__sb_put(b, s, 1);
    }
    trn__sb_put(b, "\"", 1);
}

typedef struct trn__st_item {  /* one tensor to write                     */
    const char *name;
    int ndim;
    int shape[TRN_MAX_DIMS];
    const float *src;          /* backend memory                          */
    size_t n;                  /* floats                                  */
} trn__st_item;

static void trn__st_test_delay(void) {
    const char *s = getenv("TRN_CKPT_TEST_DELAY_MS");
    long ms = s ? atol(s) : 0;
    if (ms > 0) {
        struct timespec ts;
        ts.tv_sec = ms / 1000;
        ts.tv_nsec = (ms % 1000) * 1000000L;
        nanosleep(&ts, NULL);
    }
}

static trn_result trn__write_all(int fd, const void *p, size_t n, const char *path) {
    const char *c = (const char *)p;
    while (n) {
        ssize_t w = write(fd, c, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return trn_fail(TRN_ERR_IO, "write %s: %s", path, w < 0 ? strerror(errno) : "no progress");
        c += w;
        n -= (size_t)w;
    }
    return TRN_OK;
}

/* fsync the directory holding path, so the rename itself is durable */
static trn_result trn__fsync_dir(const char *path) {
    char dir[1024];
    char *slash;
    int fd;
    snprintf(dir, sizeof dir, "%s", path);
    slash = strrchr(dir, '/');
    if (!slash) strcpy(dir, ".");
    else if (slash == dir) dir[1] = 0;
    else *slash = 0;
    fd = open(dir, O_RDONLY);
    if (fd < 0) return trn_fail(TRN_ERR_IO, "open directory %s: %s", dir, strerror(errno));
    if (fsync(fd) != 0 && errno != EINVAL) { /* EINVAL: the file system cannot sync directories */
        trn_result r = trn_fail(TRN_ERR_IO, "fsync directory %s: %s", dir, strerror(errno));
        close(fd);
        return r;
    }
    close(fd);
    return TRN_OK;
}

static trn_result trn__st_write(const char *path, const trn_backend *be, const trn__st_item *items, int n_items,
                                const trn_meta *kit, const trn_meta *user) {
    trn__sbuf h;
    trn_safetensors parsed;
    trn_result r = TRN_OK;
    char tmp[1100], num[96], hex[9];
    unsigned char len8[8];
    uint64_t off = 0, hl, max_bytes = 0;
    uint32_t crc;
    char *stage = NULL;
    size_t cap, crc_pos;
    int fd = -1, i, k;
    const trn_meta *metas[2];

    if (!trn__little_endian()) return trn_fail(TRN_ERR_INVALID, "%s: safetensors on a big-endian host is not supported", path);
    memset(&h, 0, sizeof h);
    /* 1. the header: {"__metadata__":{kit pairs, caller's pairs, "trn.crc32c":"00000000"}, tensors...} */
    metas[0] = kit; metas[1] = user;
    trn__sb_cat(&h, "{\"__metadata__\":{");
    for (k = 0; k < 2; k++) {
        for (i = 0; metas[k] && i < metas[k]->n; i++) {
            const char *key = metas[k]->key[i], *val = metas[k]->val[i];
            if (k == 1 && trn__meta_reserved(key)) continue; /* the kit's values win */
            if (!trn__utf8_valid(key) || !trn__utf8_valid(val)) {
                trn_free(h.p);
                return trn_fail(TRN_ERR_INVALID, "%s: metadata '%.60s' is not valid UTF-8", path, key);
            }
            trn__sb_json(&h, key);
            trn__sb_cat(&h, ":");
            trn__sb_json(&h, val);
            trn__sb_cat(&h, ",");
        }
    }
    trn__sb_cat(&h, "\"trn.crc32c\":\"00000000\"}");
    for (i = 0; i < n_items; i++) {
        const trn__st_item *it = &items[i];
        if (!trn__utf8_valid(it->name)) {
            trn_free(h.p);
            return trn_fail(TRN_ERR_INVALID, "%s: tensor name '%.60s' is not valid UTF-8", path, it->name);
        }
        trn__sb_cat(&h, ",");
        trn__sb_json(&h, it->name);
        trn__sb_cat(&h, ":{\"dtype\":\"F32\",\"shape\":[");
        for (k = 0; k < it->ndim; k++) {
            snprintf(num, sizeof num, k ? ",%d" : "%d", it->shape[k]);
            trn__sb_cat(&h, num);
        }
        snprintf(num, sizeof num, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off,
                 (unsigned long long)(off + 4 * (uint64_t)it->n));
        trn__sb_cat(&h, num);
        off += 4 * (uint64_t)it->n;
        if (4 * (uint64_t)it->n > max_bytes) max_bytes = 4 * (uint64_t)it->n;
    }
    trn__sb_cat(&h, "}");
    while (h.n % 8) trn__sb_cat(&h, " "); /* so the data starts 8-aligned */
    if (h.oom) { trn_free(h.p); return trn_fail(TRN_ERR_NOMEM, "%s: header: %s", path, trn_error_reason()); }

    /* 2. read our own header back: the same checks a reader makes, and the
          header's CRC and the place of the crc digits come out of it */
    memset(&parsed, 0, sizeof parsed);
    snprintf(parsed.path, sizeof parsed.path, "%s", path);
    r = trn__st_parse(&parsed, h.p, h.n, off);
    crc = parsed.crc_header;
    hl = h.n;
    crc_pos = parsed.crc_pos;
    trn_safetensors_close(&parsed);
    if (r != TRN_OK) { trn_free(h.p); return r; }

    /* 3. stream: length, header, tensors through the staging buffer */
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= sizeof tmp) {
        trn_free(h.p);
        return trn_fail(TRN_ERR_INVALID, "%s: path too long", path);
    }
    cap = (size_t)TRN__MIN((uint64_t)trn__st_staging, TRN__MAX(max_bytes, 64));
    stage = (char *)trn_alloc(cap, TRN_KIND_TEMP);
    if (!stage) { trn_free(h.p); return trn_fail(TRN_ERR_NOMEM, "%s: staging: %s", path, trn_error_reason()); }
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) r = trn_fail(TRN_ERR_IO, "create %s: %s", tmp, strerror(errno));
    for (i = 0; i < 8; i++) len8[i] = (unsigned char)(hl >> (8 * i));
    if (r == TRN_OK) r = trn__write_all(fd, len8, 8, tmp);
    if (r == TRN_OK) r = trn__write_all(fd, h.p, h.n, tmp);
    for (i = 0; i < n_items && r == TRN_OK; i++) {
        size_t done = 0;
        while (done < items[i].n && r == TRN_OK) {
            size_t n = TRN__MIN(cap / 4, items[i].n - done);
            be->download(stage, items[i].src + done, n * sizeof(float));
            crc = trn_crc32c(crc, stage, n * sizeof(float));
            r = trn__write_all(fd, stage, n * sizeof(float), tmp);
            done += n;
        }
        trn__st_test_delay();
    }
    /* 4. the CRC into its place in the header, then make it durable */
    snprintf(hex, sizeof hex, "%08x", (unsigned)crc);
    if (r == TRN_OK && pwrite(fd, hex, 8, (off_t)(8 + crc_pos)) != 8)
        r = trn_fail(TRN_ERR_IO, "write %s: %s", tmp, strerror(errno));
    if (r == TRN_OK && fsync(fd) != 0) r = trn_fail(TRN_ERR_IO, "fsync %s: %s", tmp, strerror(errno));
    if (fd >= 0 && close(fd) != 0 && r == TRN_OK) r = trn_fail(TRN_ERR_IO, "close %s: %s", tmp, strerror(errno));
    if (r == TRN_OK && rename(tmp, path) != 0) r = trn_fail(TRN_ERR_IO, "rename %s to %s: %s", tmp, path, strerror(errno));
    if (r != TRN_OK && fd >= 0) unlink(tmp); /* the old file at path is untouched */
    if (r == TRN_OK) r = trn__fsync_dir(path);
    trn_free(stage);
    trn_free(h.p);
    return r;
}

static trn_result trn__st_params(trn_model *m, trn__st_item **out, int extra) {
    trn__st_item *it;
    int i;
    *out = NULL;
    if (!m || !m->param_data) return trn_fail(TRN_ERR_INVALID, "save: model not allocated (trn_model_alloc)");
    if (m->shard.param_hi) /* >>sharding: FSDP keeps a slice of the weights */
        return trn_fail(TRN_ERR_INVALID, "save: this process holds a shard of the weights only (FSDP): "
                                         "trn_ddp_checkpoint_save_sharded, or trn_ddp_unshard first");
    it = (trn__st_item *)trn_calloc(sizeof(trn__st_item) * (size_t)(m->n_params + extra), TRN_KIND_TEMP);
    if (!it) return trn_fail(TRN_ERR_NOMEM, "save: %s", trn_error_reason());
    for (i = 0; i < m->n_params; i++) {
        const trn_tensor *p = m->params[i];
        it[i].name = p->name;
        it[i].ndim = p->ndim;
        memcpy(it[i].shape, p->shape, sizeof p->shape);
        it[i].src = m->param_data + p->offset;
        it[i].n = p->size;
    }
    *out = it;
    return TRN_OK;
}

static void trn__kit_meta(trn_meta *kit, const char *kind, const trn_model *m) {
    memset(kit, 0, sizeof *kit);
    trn_meta_set(kit, "format", "pt"); /* Hugging Face loaders look for it */
    trn_meta_set(kit, "trn.version", "1");
    trn_meta_set(kit, "trn.kind", kind);
    trn_meta_set_u64(kit, "trn.n_floats", (uint64_t)m->n_floats);
}

TRNDEF trn_result trn_safetensors_save(const char *path, trn_model *m, const trn_meta *meta) {
    trn__st_item *items;
    trn_meta kit;
    trn_result r;
    if (!path) return trn_fail(TRN_ERR_INVALID, "trn_safetensors_save: path is NULL");
    if ((r = trn__st_params(m, &items, 0)) != TRN_OK) return r;
    trn__kit_meta(&kit, "weights", m);
    r = trn__st_write(path, m->backend, items, m->n_params, &kit, meta);
    trn_free(items);
    return r;
}

/* --- training-state checkpoints ------------------------------------------ */
/* the tensors and the kit's metadata of a training-state checkpoint */
static trn_result trn__ckpt_items(trn_model *m, const trn_adamw *opt, trn__st_item **items_out, int *n_out,
                                  trn_meta *kit) {
    trn__st_item *items;
    trn_result r;
    int n;
    *items_out = NULL;
    *n_out = 0;
    if (trn_model_find(m, "optim.m") || trn_model_find(m, "optim.v"))
        return trn_fail(TRN_ERR_INVALID, "trn_checkpoint_save: parameter names optim.m / optim.v are taken by the checkpoint");
    if ((r = trn__st_params(m, &items, 2)) != TRN_OK) return r;
    n = m->n_params;
    trn__kit_meta(kit, "checkpoint", m);
    trn_meta_set_u64(kit, "trn.model.rng", m->rng.state); /* dropout's position */
    if (opt) {
        trn_meta_set_u64(kit, "trn.optim.step", (uint64_t)opt->step);
        trn_meta_set_f64(kit, "trn.optim.lr", opt->desc.lr);
        trn_meta_set_f64(kit, "trn.optim.beta1", opt->desc.beta1);
        trn_meta_set_f64(kit, "trn.optim.beta2", opt->desc.beta2);
        trn_meta_set_f64(kit, "trn.optim.eps", opt->desc.eps);
        trn_meta_set_f64(kit, "trn.optim.weight_decay", opt->desc.weight_decay);
        trn_meta_set_u64(kit, "trn.optim.no_weight_decay", (uint64_t)(opt->desc.no_weight_decay != 0));
        trn_meta_set_u64(kit, "trn.optim.lo", (uint64_t)opt->lo);
        trn_meta_set_u64(kit, "trn.optim.hi", (uint64_t)opt->hi);
        if (opt->desc.algo == TRN_OPTIM_SGD) { /* absent: AdamW (files from before SGD existed) */
            trn_meta_set(kit, "trn.optim.algo", "sgd");
            trn_meta_set_f64(kit, "trn.optim.momentum", opt->desc.momentum);
            trn_meta_set_f64(kit, "trn.optim.dampening", opt->desc.dampening);
            trn_meta_set_u64(kit, "trn.optim.nesterov", (uint64_t)(opt->desc.nesterov != 0));
        }
        if (opt->m && (opt->v || opt->desc.algo == TRN_OPTIM_SGD)) { /* SGD: the momentum buffer in optim.m */
            size_t nm = opt->hi - opt->lo;
            if (opt->hi <= opt->lo || opt->hi > m->n_floats || nm > 2147483647u) {
                trn_free(items);
                return trn_fail(TRN_ERR_INVALID, "trn_checkpoint_save: optimizer slice [%zu,%zu) of %zu floats",
                                opt->lo, opt->hi, m->n_floats);
            }
            items[n].name = "optim.m"; items[n].ndim = 1; items[n].shape[0] = (int)nm;
            items[n].src = opt->m; items[n].n = nm; n++;
            if (opt->v) {
                items[n].name = "optim.v"; items[n].ndim = 1; items[n].shape[0] = (int)nm;
                items[n].src = opt->v; items[n].n = nm; n++;
            }
        }
    }
    *items_out = items;
    *n_out = n;
    return TRN_OK;
}

TRNDEF trn_result trn_checkpoint_save(const char *path, trn_model *m, const trn_adamw *opt, const trn_meta *meta) {
    trn__st_item *items;
    trn_meta kit;
    trn_result r;
    int n;
    if (!path) return trn_fail(TRN_ERR_INVALID, "trn_checkpoint_save: path is NULL");
    if ((r = trn__ckpt_items(m, opt, &items, &n, &kit)) != TRN_OK) return r;
    r = trn__st_write(path, m->backend, items, n, &kit, meta);
    trn_free(items);
    return r;
}

/* a trn_meta view of the file's metadata, for the typed getters */
static trn_result trn__ckpt_get(const trn_safetensors *f, const char *key, uint64_t *u, double *d) {
    const char *s = trn_safetensors_meta(f, key);
    char *end;
    if (!s) return trn_fail(TRN_ERR_FORMAT, "%s: checkpoint metadata lacks '%s'", f->path, key);
    if (u && trn__parse_u64(s, u) == TRN_OK) return TRN_OK;
    if (d) {
        *d = strtod(s, &end);
        if (*s && !*end) return TRN_OK;
    }
    return trn_fail(TRN_ERR_FORMAT, "%s: checkpoint metadata '%s' = '%.40s' is not a number", f->path, key, s);
}

static trn_result trn__ckpt_open(trn_safetensors *f, const char *path) {
    trn_result r = trn_safetensors_open(f, path);
    const char *kind;
    if (r != TRN_OK) return r;
    kind = trn_safetensors_meta(f, "trn.kind");
    if (!f->has_crc || !kind || strcmp(kind, "checkpoint") != 0) {
        trn_safetensors_close(f);
        return trn_fail(TRN_ERR_FORMAT, "%s: not a train.h training checkpoint (no trn.kind=checkpoint%s)", path,
                        f->has_crc ? "" : " and no trn.crc32c");
    }
    return TRN_OK;
}

TRNDEF trn_result trn_checkpoint_verify(const char *path) {
    trn_safetensors f;
    trn_result r;
    if (!path) return trn_fail(TRN_ERR_INVALID, "trn_checkpoint_verify: path is NULL");
    if ((r = trn__ckpt_open(&f, path)) != TRN_OK) return r;
    r = trn_safetensors_verify(&f);
    trn_safetensors_close(&f);
    return r;
}

TRNDEF trn_result trn_checkpoint_load(const char *path, trn_model *m, trn_adamw *opt, trn_meta *meta_out) {
    trn_safetensors f;
    trn_result r;
    uint64_t step = 0, lo = 0, hi = 0, nwd = 0, nesterov = 0;
    double lr = 0, b1 = 0, b2 = 0, eps = 0, wd = 0, momentum = 0, dampening = 0;
    const char *algo_s;
    trn_optim_algo algo = TRN_OPTIM_ADAMW;
    const trn_st_tensor *em;
    float *mm = NULL, *mv = NULL;
    size_t n_mom = 0;
    if (!path || !m || !m->param_data) return trn_fail(TRN_ERR_INVALID, "trn_checkpoint_load: no path or model not allocated");
    trn_params_changed(m); /* bf16: the weights' copy follows the loaded master */
    if (m->shard.param_hi) /* >>sharding: FSDP keeps a slice of the weights */
        return trn_fail(TRN_ERR_INVALID, "trn_checkpoint_load: this process holds a shard of the weights only (FSDP): "
                                         "use trn_ddp_checkpoint_load_sharded");
    if ((r = trn__ckpt_open(&f, path)) != TRN_OK) return r;
    em = trn_safetensors_find(&f, "optim.m");
    if ((r = trn__st_check_model(&f, m, 1)) != TRN_OK) goto done;
    if (opt) {
        if ((r = trn__ckpt_get(&f, "trn.optim.step", &step, NULL)) || (r = trn__ckpt_get(&f, "trn.optim.lo", &lo, NULL)) ||
            (r = trn__ckpt_get(&f, "trn.optim.hi", &hi, NULL)) ||
            (r = trn__ckpt_get(&f, "trn.optim.no_weight_decay", &nwd, NULL)) ||
            (r = trn__ckpt_get(&f, "trn.optim.lr", NULL, &lr)) || (r = trn__ckpt_get(&f, "trn.optim.beta1", NULL, &b1)) ||
            (r = trn__ckpt_get(&f, "trn.optim.beta2", NULL, &b2)) || (r = trn__ckpt_get(&f, "trn.optim.eps", NULL, &eps)) ||
            (r = trn__ckpt_get(&f, "trn.optim.weight_decay", NULL, &wd)))
            goto done;
        algo_s = trn_safetensors_meta(&f, "trn.optim.algo");
        if (algo_s && strcmp(algo_s, "sgd") == 0) {
            algo = TRN_OPTIM_SGD;
            if ((r = trn__ckpt_get(&f, "trn.optim.momentum", NULL, &momentum)) ||
                (r = trn__ckpt_get(&f, "trn.optim.dampening", NULL, &dampening)) ||
                (r = trn__ckpt_get(&f, "trn.optim.nesterov", &nesterov, NULL)))
                goto done;
        } else if (algo_s && strcmp(algo_s, "adamw") != 0) {
            r = trn_fail(TRN_ERR_FORMAT, "%s: unknown optimizer '%.40s'", path, algo_s);
            goto done;
        }
        /* state of the other algorithm (an AdamW optimizer loading an SGD
           checkpoint, or back) is dropped: the file's state replaces it */
        if (opt->m && opt->desc.algo != algo) trn_adamw_free(opt);
        if (em) {
            if (lo >= hi || hi > (uint64_t)m->n_floats || (algo == TRN_OPTIM_ADAMW) != !!trn_safetensors_find(&f, "optim.v")) {
                r = trn_fail(TRN_ERR_FORMAT, "%s: optimizer slice [%llu,%llu) does not fit %zu parameters", path,
                             (unsigned long long)lo, (unsigned long long)hi, m->n_floats);
                goto done;
            }
            n_mom = (size_t)(hi - lo);
            if (opt->m && (opt->lo != lo || opt->hi != hi)) {
                r = trn_fail(TRN_ERR_MISMATCH, "%s: the checkpoint holds moments of [%llu,%llu), the optimizer owns [%zu,%zu)",
                             path, (unsigned long long)lo, (unsigned long long)hi, opt->lo, opt->hi);
                goto done;
            }
            if (!opt->m) { /* as trn_adamw_step would allocate them */
                opt->backend = m->backend;
                opt->lo = (size_t)lo;
                opt->hi = (size_t)hi;
                opt->m = (float *)m->backend->alloc(n_mom * sizeof(float), TRN_KIND_OPTIM);
                opt->v = opt->m && algo == TRN_OPTIM_ADAMW ? (float *)m->backend->alloc(n_mom * sizeof(float), TRN_KIND_OPTIM) : NULL;
                if (!opt->m || (algo == TRN_OPTIM_ADAMW && !opt->v)) {
                    r = trn_fail(TRN_ERR_NOMEM, "%s: moments: %s", path, trn_error_reason());
                    trn_adamw_free(opt);
                    goto done;
                }
            }
            mm = opt->m;
            mv = opt->v;
        }
    }
    if ((r = trn__st_load_into(&f, m, mm, mv, n_mom)) != TRN_OK) goto done;
    if ((r = trn__st_meta_out(&f, meta_out)) != TRN_OK) goto done;
    if (trn_safetensors_meta(&f, "trn.model.rng")) { /* absent in files from before dropout */
        uint64_t st;
        if ((r = trn__ckpt_get(&f, "trn.model.rng", &st, NULL)) != TRN_OK) goto done;
        m->rng.state = st;
    }
    if (opt) {
        if (!em) trn_adamw_free(opt); /* saved before the first step: moments appear on the next */
        opt->step = (long long)step;
        opt->lo = (size_t)lo;
        opt->hi = (size_t)hi;
        opt->desc.lr = (float)lr;
        opt->desc.beta1 = (float)b1;
        opt->desc.beta2 = (float)b2;
        opt->desc.eps = (float)eps;
        opt->desc.weight_decay = (float)wd;
        opt->desc.no_weight_decay = (int)nwd;
        opt->desc.algo = algo;
        opt->desc.momentum = (float)momentum;
        opt->desc.dampening = (float)dampening;
        opt->desc.nesterov = (int)nesterov;
    }
done:
    trn_safetensors_close(&f);
    return r;
}

/* --- directories ----------------------------------------------------------- */
TRNDEF trn_result trn_mkdirs(const char *dir) {
    char buf[4096];
    char *p;
    struct stat st;
    if (!dir || !*dir) return trn_fail(TRN_ERR_INVALID, "trn_mkdirs: empty path");
    if ((size_t)snprintf(buf, sizeof buf, "%s", dir) >= sizeof buf) return trn_fail(TRN_ERR_INVALID, "%s: path too long", dir);
    for (p = buf + 1; *p; p++) { /* each parent, then dir itself */
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(buf, 0755) != 0 && errno != EEXIST) return trn_fail(TRN_ERR_IO, "mkdir %s: %s", buf, strerror(errno));
        *p = '/';
    }
    if (mkdir(buf, 0755) != 0 && errno != EEXIST) return trn_fail(TRN_ERR_IO, "mkdir %s: %s", buf, strerror(errno));
    if (stat(buf, &st) != 0 || !S_ISDIR(st.st_mode)) return trn_fail(TRN_ERR_IO, "%s is not a directory", buf);
    return TRN_OK;
}

/* seconds on a monotonic clock (the profile's host clock; the companions' timers) */
static double trn__now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* <<checkpoint implementation end */

/* >>profile implementation */
/* ========================================================================
   >>profile
   The tape's marks: trn_reset starts a pass, each op's record and each
   backward call take a mark, trn_backward adds the intervals up per op
   kind. The table is printed by extras/train_loop.h (trn_profile_print).
   ======================================================================== */
struct trn__pmark {
    const char *op;      /* the op whose work ends at this mark              */
    int phase;           /* -1: no op (the interval before it is not counted),
                            0: forward of op, 1: backward of op              */
    size_t arena;        /* arena bytes in use at the mark                   */
    double t;            /* host clock (seconds), when no other clock is set */
};

TRNDEF void trn_profile_attach(trn_profile *p, trn_model *m) {
    if (!p || !m) trn_fatal("trn_profile_attach: NULL");
    memset(p, 0, sizeof *p);
    p->clock_name = "host clock";
    p->model = m;
    m->profile = p;
}

static void trn__prof_mark(trn_model *m, const char *op, int phase) {
    trn_profile *p = m->profile;
    struct trn__pmark *k;
    if (!trn__grow((void **)&p->marks, &p->cap_marks, p->n_marks, sizeof *p->marks)) trn_fatal("profile: %s", trn_error_reason());
    k = &p->marks[p->n_marks];
    k->op = op;
    k->phase = phase;
    k->arena = m->arena.used + m->arena.spilled + m->grads.handed_out; /* activations and their gradients */
    if (p->mark) {
        p->mark(p, p->n_marks);
    } else {
        if (m->backend->place != TRN_HOST) m->backend->sync(); /* the work, not its launch */
        k->t = trn__now();
    }
    p->n_marks++;
}

/* the pass is over: read the clock, add each interval to its op's row */
static void trn__prof_end(trn_model *m) {
    trn_profile *p = m->profile;
    int i, r, n = p->n_marks;
    if (n > 1) {
        if (p->cap_ms < n) { /* one slot per mark */
            trn_free(p->ms);
            if (!(p->ms = (double *)trn_alloc(sizeof(double) * (size_t)n, TRN_KIND_RUNTIME))) trn_fatal("profile: %s", trn_error_reason());
            p->cap_ms = n;
        }
        if (p->read) p->read(p, n, p->ms);
        else for (i = 1; i < n; i++) p->ms[i] = 1e3 * (p->marks[i].t - p->marks[i - 1].t);
        for (i = 1; i < n; i++) {
            const struct trn__pmark *k = &p->marks[i];
            if (k->phase < 0) continue;
            for (r = 0; r < p->n_rows; r++)
                if (p->rows[r].op == k->op || strcmp(p->rows[r].op, k->op) == 0) break;
            if (r == p->n_rows) {
                if (r == TRN_PROFILE_MAX_OPS) continue; /* more op kinds than rows: not counted */
                memset(&p->rows[r], 0, sizeof p->rows[r]);
                p->rows[r].op = k->op;
                p->n_rows++;
            }
            p->rows[r].calls[k->phase]++;
            p->rows[r].ms[k->phase] += p->ms[i];
            p->rows[r].bytes[k->phase] += (double)(k->arena - TRN__MIN(k->arena, p->marks[i - 1].arena));
        }
        p->passes++;
    }
    p->n_marks = 0;
}

TRNDEF void trn_profile_free(trn_profile *p) {
    if (!p) return;
    if (p->clock_free) p->clock_free(p);
    if (p->model && p->model->profile == p) p->model->profile = NULL;
    trn_free(p->marks);
    trn_free(p->ms);
    memset(p, 0, sizeof *p);
}
/* <<profile implementation end */

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
