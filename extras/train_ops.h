/* extras/train_ops.h - a companion of train.h: more tape ops: dropout, reshape/transpose/slice/concat, sums and means, batched matmul, cross-entropy with ignore_index and label smoothing, BCE, L1, Huber

   Do this:
      #define TRAIN_IMPLEMENTATION
      #include "train.h"
      #include "extras/train_ops.h"
   in the one C or C++ file that implements train.h; every other file
   includes both plainly. This header's implementation comes with train.h's
   (it records with train.h's private tape helpers), so it needs no macro
   of its own; TRAIN_OPS_IMPLEMENTATION is accepted and must sit in the
   same file as TRAIN_IMPLEMENTATION.

   Every op here is written the way you write your own (trn_op +
   trn_op_apply, train.h's >>opapi): read one before writing yours. The
   step of the examples uses none of them. Their kernels stay in train.h
   (>>ops3 there: the plain forward/backward functions) because they are
   entries of the backend table that train_cuda.h fills with CUDA kernels;
   each declaration below names its pair. Nothing in train.h, train_cuda.h
   or train_nccl.h calls this file. Why a companion: docs/DESIGN-notes.md.

   Contents (grep for the anchors):
      >>ops3        the tape ops (train.h's >>ops3 has their kernels)

   License: MIT, as train.h.
*/
#ifndef TRAIN_H_INCLUDED
#error "extras/train_ops.h: include train.h first"
#endif
#ifndef TRAIN_OPS_H_INCLUDED
#define TRAIN_OPS_H_INCLUDED

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------
   >>ops3 on the tape.
   trn_dropout: in training mode zeroes each element with probability p and
     scales the rest by 1/(1-p); the mask comes from the model's RNG m->rng
     (one draw per call; saved in training checkpoints). In evaluation mode
     (trn_eval) or with p = 0 it returns x itself. trn_gradcheck runs the
     forward many times: reseed m->rng at the start of its build function
     so that every probe sees the same mask (tests/test_ops_shape_loss does).
   trn_reshape: a view with a new shape of the same size (no copy).
   trn_transpose: swaps dims d0 and d1 (negative counts from the end).
   trn_slice: x[..., start:start+len]; trn_concat: [a | b] on the last dim.
   trn_sum, trn_mean: over the last dim, which goes away ((B,T,C) -> (B,T);
     a 1-D x gives (1)); trn_sum_all, trn_mean_all: every element -> (1).
   trn_bmm: op(a) @ op(b) over equal batch dims: a (...,M,K), b (...,K,N)
     -> (...,M,N); trans_a / trans_b: the matrix is stored transposed.
   trn_cross_entropy_ex: as trn_cross_entropy (logits (...,Vp), the first
     n_valid classes real), plus torch's ignore_index (rows whose target is
     ignore_index count for nothing; the mean is over the other rows; all
     ignored: 0, where torch gives nan) and label_smoothing in [0,1].
   trn_bce_with_logits (targets in [0,1]), trn_l1, trn_huber(delta > 0):
     means over all elements, as torch's BCEWithLogitsLoss, L1Loss,
     HuberLoss; targets are host arrays of pred's size. */
/* kernels: trn_dropout_forward, trn_dropout_backward (>>ops3) */
TRNDEF trn_tensor *trn_dropout(trn_model *m, trn_tensor *x, float p);
/* no kernel: a view */
TRNDEF trn_tensor *trn_reshape(trn_model *m, trn_tensor *x, int ndim, const int *shape);
/* kernels: trn_transpose_forward, trn_transpose_backward (>>ops3) */
TRNDEF trn_tensor *trn_transpose(trn_model *m, trn_tensor *x, int d0, int d1);
/* kernels: trn_slice_forward, trn_slice_backward (>>ops3) */
TRNDEF trn_tensor *trn_slice(trn_model *m, trn_tensor *x, int start, int len);
/* kernels: trn_concat_forward, trn_concat_backward (>>ops3) */
TRNDEF trn_tensor *trn_concat(trn_model *m, trn_tensor *a, trn_tensor *b);
/* kernels: trn_sum_forward, trn_sum_backward (>>ops3) */
TRNDEF trn_tensor *trn_sum(trn_model *m, trn_tensor *x);
/* kernels: trn_sum_forward, trn_sum_backward with scale 1/C (>>ops3) */
TRNDEF trn_tensor *trn_mean(trn_model *m, trn_tensor *x);
/* kernels: trn_sum_forward, trn_sum_backward (>>ops3) */
TRNDEF trn_tensor *trn_sum_all(trn_model *m, trn_tensor *x);
/* kernels: trn_sum_forward, trn_sum_backward (>>ops3) */
TRNDEF trn_tensor *trn_mean_all(trn_model *m, trn_tensor *x);
/* kernels: trn_bmm_forward, trn_bmm_backward (>>ops3) */
TRNDEF trn_tensor *trn_bmm(trn_model *m, trn_tensor *a, trn_tensor *b, int trans_a, int trans_b);
/* kernels: trn_cross_entropy_ex_forward, trn_cross_entropy_ex_backward (>>ops3) */
TRNDEF trn_tensor *trn_cross_entropy_ex(trn_model *m, trn_tensor *logits, const int *targets, int n_valid,
                                        int ignore_index, float label_smoothing);
/* kernels: trn_bce_with_logits_forward, trn_bce_with_logits_backward (>>ops3) */
TRNDEF trn_tensor *trn_bce_with_logits(trn_model *m, trn_tensor *logits, const float *targets);
/* kernels: trn_l1_forward, trn_l1_backward (>>ops3) */
TRNDEF trn_tensor *trn_l1(trn_model *m, trn_tensor *pred, const float *target);
/* kernels: trn_huber_forward, trn_huber_backward (>>ops3) */
TRNDEF trn_tensor *trn_huber(trn_model *m, trn_tensor *pred, const float *target, float delta);
/* <<ops3 declarations end */

#ifdef __cplusplus
}
#endif
#endif /* TRAIN_OPS_H_INCLUDED */

#if defined(TRAIN_OPS_IMPLEMENTATION) && !defined(TRAIN_IMPLEMENTATION)
#error "extras/train_ops.h: TRAIN_OPS_IMPLEMENTATION needs TRAIN_IMPLEMENTATION in the same file (define it before train.h)"
#endif
#ifdef TRAIN_IMPLEMENTATION
#ifndef TRAIN_IMPLEMENTATION_DONE
#error "extras/train_ops.h: train.h's implementation is not in this file (define TRAIN_IMPLEMENTATION before the first #include \"train.h\")"
#endif
#ifndef TRAIN_OPS_IMPLEMENTATION_DONE
#define TRAIN_OPS_IMPLEMENTATION_DONE

/* ========================================================================
   >>ops3 on the tape: each written with the public op API (train.h's
   >>opapi), the backend table picking CPU or CUDA kernels (TRN__OP2: one
   trn_op for both)
   ======================================================================== */

/* --- dropout: iarg[0..1] the call's 64-bit key, farg[0] p. Saves nothing
   (the mask is recomputed from the key). Identity, and no op at all, in
   evaluation mode (trn_eval) or for p = 0: the input itself comes back. */
static uint64_t trn__dropout_key(const trn_tape_entry *e) {
    return (uint64_t)(uint32_t)e->iarg[0] | (uint64_t)(uint32_t)e->iarg[1] << 32;
}
static void trn__dropout_fw(trn_model *m, trn_tape_entry *e) {
    m->backend->dropout_forward(e->out->data, e->in[0]->data, e->out->size, e->farg[0], trn__dropout_key(e));
}
static void trn__dropout_bw(trn_model *m, trn_tape_entry *e) {
    m->backend->dropout_backward(trn_grad(m, e->in[0]), trn_grad(m, e->out), e->out->size, e->farg[0],
                                 trn__dropout_key(e));
}
static const trn_op trn__dropout_op = TRN__OP2("dropout", trn__dropout_fw, trn__dropout_bw);
TRNDEF trn_tensor *trn_dropout(trn_model *m, trn_tensor *x, float p) {
    trn_tensor *out;
    trn_op_args args;
    uint64_t key;
    trn__not_null("trn_dropout", m, x);
    x = trn__act(m, x);
    if (!(p >= 0.0f && p <= 1.0f)) trn_fatal("trn_dropout: p = %g (must be in [0,1])", (double)p);
    if (!m->training || p == 0.0f) return x;
    key = trn_rng_next(&m->rng); /* one draw per call: the model's RNG is in the checkpoint */
    memset(&args, 0, sizeof args);
    args.i[0] = (int)(uint32_t)key; args.i[1] = (int)(uint32_t)(key >> 32);
    args.f[0] = p;
    out = trn_tensor_new(m, "dropout", x->ndim, x->shape);
    trn_op_apply(m, &trn__dropout_op, out, x, NULL, NULL, &args);
    return out;
}

/* --- reshape: a view. out's data IS x's data (no copy, nothing saved);
   only the gradient needs a move: backward adds out's gradient into x's
   (the same elements in the same order). */
static void trn__reshape_fw(trn_model *m, trn_tape_entry *e) { (void)m; (void)e; /* the view is the output */ }
static void trn__reshape_bw(trn_model *m, trn_tape_entry *e) {
    float *dx = trn_grad(m, e->in[0]);
    if (dx) m->backend->accumulate(dx, trn_grad(m, e->out), e->out->size);
}
static const trn_op trn__reshape_op = TRN__OP2("reshape", trn__reshape_fw, trn__reshape_bw);
TRNDEF trn_tensor *trn_reshape(trn_model *m, trn_tensor *x, int ndim, const int *shape) {
    trn_tensor *out;
    char s[64];
    trn__not_null("trn_reshape", m, x);
    x = trn__act(m, x);
    trn__check_shape("trn_reshape", x->name, ndim, shape);
    if (trn_shape_size(ndim, shape) != x->size)
        trn_fatal("trn_reshape: %s %s has %zu elements, the new shape %zu", x->name, trn_shape_str(x, s, 64), x->size,
                  trn_shape_size(ndim, shape));
    out = trn__header(m);
    trn__fill_header(out, "reshape", ndim, shape);
    out->data = x->data;
    out->dtype = x->dtype;
    trn_op_apply(m, &trn__reshape_op, out, x, NULL, NULL, NULL);
    return out;
}

/* --- transpose of dims d0 < d1, in the 5-D view (A, D0, Bm, D1, C) of the
   kernels; iarg: D0, Bm, D1, C (A = size / the rest). Saves nothing. */
static void trn__transpose_dims(const trn_tape_entry *e, int *A, int *D0, int *Bm, int *D1, int *C) {
    *D0 = e->iarg[0]; *Bm = e->iarg[1]; *D1 = e->iarg[2]; *C = e->iarg[3];
    *A = (int)(e->out->size / ((size_t)*D0 * *Bm * *D1 * *C));
}
static void trn__transpose_fw(trn_model *m, trn_tape_entry *e) {
    int A, D0, Bm, D1, C;
    trn__transpose_dims(e, &A, &D0, &Bm, &D1, &C);
    m->backend->transpose_forward(e->out->data, e->in[0]->data, A, D0, Bm, D1, C);
}
static void trn__transpose_bw(trn_model *m, trn_tape_entry *e) {
    int A, D0, Bm, D1, C;
    trn__transpose_dims(e, &A, &D0, &Bm, &D1, &C);
    m->backend->transpose_backward(trn_grad(m, e->in[0]), trn_grad(m, e->out), A, D0, Bm, D1, C);
}
static const trn_op trn__transpose_op = TRN__OP2("transpose", trn__transpose_fw, trn__transpose_bw);
TRNDEF trn_tensor *trn_transpose(trn_model *m, trn_tensor *x, int d0, int d1) {
    int shape[TRN_MAX_DIMS], k, t, Bm = 1, C = 1;
    trn_tensor *out;
    trn_op_args args;
    trn__not_null("trn_transpose", m, x);
    x = trn__act(m, x);
    if (d0 < 0) d0 += x->ndim;
    if (d1 < 0) d1 += x->ndim;
    if (d0 < 0 || d1 < 0 || d0 >= x->ndim || d1 >= x->ndim) {
        char s[64];
        trn_fatal("trn_transpose: dims %d, %d of %s %s", d0, d1, x->name, trn_shape_str(x, s, 64));
    }
    if (d0 == d1) return x;
    if (d0 > d1) { t = d0; d0 = d1; d1 = t; }
    for (k = d0 + 1; k < d1; k++) Bm *= x->shape[k];
    for (k = d1 + 1; k < x->ndim; k++) C *= x->shape[k];
    memcpy(shape, x->shape, sizeof shape);
    shape[d0] = x->shape[d1]; shape[d1] = x->shape[d0];
    memset(&args, 0, sizeof args);
    args.i[0] = x->shape[d0]; args.i[1] = Bm; args.i[2] = x->shape[d1]; args.i[3] = C;
    out = trn_tensor_new(m, "transpose", x->ndim, shape);
    trn_op_apply(m, &trn__transpose_op, out, x, NULL, NULL, &args);
    return out;
}

/* --- slice and concat along the last dim; iarg: slice C, start, len;
   concat Ca, Cb. Save nothing. */
static void trn__slice_fw(trn_model *m, trn_tape_entry *e) {
    int len = e->iarg[2];
    m->backend->slice_forward(e->out->data, e->in[0]->data, (int)(e->out->size / (size_t)len), e->iarg[0], e->iarg[1], len);
}
static void trn__slice_bw(trn_model *m, trn_tape_entry *e) {
    int len = e->iarg[2];
    m->backend->slice_backward(trn_grad(m, e->in[0]), trn_grad(m, e->out), (int)(e->out->size / (size_t)len), e->iarg[0],
                               e->iarg[1], len);
}
static const trn_op trn__slice_op = TRN__OP2("slice", trn__slice_fw, trn__slice_bw);
TRNDEF trn_tensor *trn_slice(trn_model *m, trn_tensor *x, int start, int len) {
    int shape[TRN_MAX_DIMS];
    trn_tensor *out;
    trn_op_args args;
    trn__not_null("trn_slice", m, x);
    x = trn__act(m, x);
    if (start < 0 || len <= 0 || start + len > TRN__LAST(x)) {
        char s[64];
        trn_fatal("trn_slice: columns [%d,%d) of %s %s", start, start + len, x->name, trn_shape_str(x, s, 64));
    }
    memcpy(shape, x->shape, sizeof shape);
    shape[x->ndim - 1] = len;
    memset(&args, 0, sizeof args);
    args.i[0] = TRN__LAST(x); args.i[1] = start; args.i[2] = len;
    out = trn_tensor_new(m, "slice", x->ndim, shape);
    trn_op_apply(m, &trn__slice_op, out, x, NULL, NULL, &args);
    return out;
}

static void trn__concat_fw(trn_model *m, trn_tape_entry *e) {
    int Ca = e->iarg[0], Cb = e->iarg[1];
    m->backend->concat_forward(e->out->data, e->in[0]->data, e->in[1]->data, (int)(e->out->size / (size_t)(Ca + Cb)), Ca, Cb);
}
static void trn__concat_bw(trn_model *m, trn_tape_entry *e) {
    int Ca = e->iarg[0], Cb = e->iarg[1];
    m->backend->concat_backward(trn_grad(m, e->in[0]), trn_grad(m, e->in[1]), trn_grad(m, e->out),
                                (int)(e->out->size / (size_t)(Ca + Cb)), Ca, Cb);
}
static const trn_op trn__concat_op = TRN__OP2("concat", trn__concat_fw, trn__concat_bw);
TRNDEF trn_tensor *trn_concat(trn_model *m, trn_tensor *a, trn_tensor *b) {
    int shape[TRN_MAX_DIMS];
    trn_tensor *out;
    trn_op_args args;
    trn__not_null("trn_concat", a, b);
    a = trn__act(m, a); b = trn__act(m, b);
    trn__need(a->ndim == b->ndim && memcmp(a->shape, b->shape, sizeof(int) * (size_t)(a->ndim - 1)) == 0, "trn_concat",
              a, b, "all dims but the last must be equal");
    memcpy(shape, a->shape, sizeof shape);
    shape[a->ndim - 1] = TRN__LAST(a) + TRN__LAST(b);
    memset(&args, 0, sizeof args);
    args.i[0] = TRN__LAST(a); args.i[1] = TRN__LAST(b);
    out = trn_tensor_new(m, "concat", a->ndim, shape);
    trn_op_apply(m, &trn__concat_op, out, a, b, NULL, &args);
    return out;
}

/* --- sum and mean: over the last dim (keepdim false; a 1-D input gives
   (1)), or over everything (_all, a scalar (1)); iarg[0] C (the reduced
   length, as two halves: iarg[0] low, iarg[1] high), farg[0] the scale
   (1 or 1/C). Save nothing. */
static size_t trn__sum_len(const trn_tape_entry *e) { return (size_t)(uint32_t)e->iarg[0] | (size_t)(uint32_t)e->iarg[1] << 32; }
static void trn__sum_fw(trn_model *m, trn_tape_entry *e) {
    m->backend->sum_forward(e->out->data, e->in[0]->data, (int)e->out->size, trn__sum_len(e), e->farg[0]);
}
static void trn__sum_bw(trn_model *m, trn_tape_entry *e) {
    m->backend->sum_backward(trn_grad(m, e->in[0]), trn_grad(m, e->out), (int)e->out->size, trn__sum_len(e), e->farg[0]);
}
static const trn_op trn__sum_op = TRN__OP2("sum", trn__sum_fw, trn__sum_bw);
static trn_tensor *trn__reduce(trn_model *m, trn_tensor *x, int all, int mean, const char *name) {
    int shape[TRN_MAX_DIMS], nd = 1;
    size_t C;
    trn_tensor *out;
    trn_op_args args;
    trn__not_null(name, m, x);
    x = trn__act(m, x);
    C = all ? x->size : (size_t)TRN__LAST(x);
    shape[0] = 1;
    if (!all && x->ndim > 1) { nd = x->ndim - 1; memcpy(shape, x->shape, sizeof(int) * (size_t)nd); }
    memset(&args, 0, sizeof args);
    args.i[0] = (int)(uint32_t)C; args.i[1] = (int)(uint32_t)((uint64_t)C >> 32);
    args.f[0] = mean ? (float)(1.0 / (double)C) : 1.0f;
    out = trn_tensor_new(m, name, nd, shape);
    trn_op_apply(m, &trn__sum_op, out, x, NULL, NULL, &args);
    return out;
}
TRNDEF trn_tensor *trn_sum(trn_model *m, trn_tensor *x) { return trn__reduce(m, x, 0, 0, "sum"); }
TRNDEF trn_tensor *trn_mean(trn_model *m, trn_tensor *x) { return trn__reduce(m, x, 0, 1, "mean"); }
TRNDEF trn_tensor *trn_sum_all(trn_model *m, trn_tensor *x) { return trn__reduce(m, x, 1, 0, "sum_all"); }
TRNDEF trn_tensor *trn_mean_all(trn_model *m, trn_tensor *x) { return trn__reduce(m, x, 1, 1, "mean_all"); }

/* --- batched matmul: iarg M, N, K, ta | tb << 1. Saves nothing: backward
   reads the inputs a and b. */
static void trn__bmm_fw(trn_model *m, trn_tape_entry *e) {
    int M = e->iarg[0], N = e->iarg[1], K = e->iarg[2];
    m->backend->bmm_forward(e->out->data, e->in[0]->data, e->in[1]->data, (int)(e->out->size / ((size_t)M * N)), M, N, K,
                            e->iarg[3] & 1, e->iarg[3] >> 1);
}
static void trn__bmm_bw(trn_model *m, trn_tape_entry *e) {
    int M = e->iarg[0], N = e->iarg[1], K = e->iarg[2];
    m->backend->bmm_backward(trn_grad(m, e->in[0]), trn_grad(m, e->in[1]), trn_grad(m, e->out), e->in[0]->data,
                             e->in[1]->data, (int)(e->out->size / ((size_t)M * N)), M, N, K, e->iarg[3] & 1,
                             e->iarg[3] >> 1);
}
static const trn_op trn__bmm_op = TRN__OP2("bmm", trn__bmm_fw, trn__bmm_bw);
TRNDEF trn_tensor *trn_bmm(trn_model *m, trn_tensor *a, trn_tensor *b, int trans_a, int trans_b) {
    int shape[TRN_MAX_DIMS], nd, M, N, K, Kb, ok;
    trn_tensor *out;
    trn_op_args args;
    trn__not_null("trn_bmm", a, b);
    a = trn__act(m, a); b = trn__act(m, b);
    nd = a->ndim;
    ok = nd >= 2 && b->ndim == nd && memcmp(a->shape, b->shape, sizeof(int) * (size_t)(nd - 2)) == 0;
    trn__need(ok, "trn_bmm", a, b, "a and b must have the same batch dims and two matrix dims");
    M = a->shape[nd - (trans_a ? 1 : 2)]; K = a->shape[nd - (trans_a ? 2 : 1)];
    Kb = b->shape[nd - (trans_b ? 1 : 2)]; N = b->shape[nd - (trans_b ? 2 : 1)];
    trn__need(K == Kb, "trn_bmm", a, b, "inner dims of op(a) (M,K) and op(b) (K,N) differ");
    memcpy(shape, a->shape, sizeof shape);
    shape[nd - 2] = M; shape[nd - 1] = N;
    memset(&args, 0, sizeof args);
    args.i[0] = M; args.i[1] = N; args.i[2] = K; args.i[3] = (trans_a != 0) | (trans_b != 0) << 1;
    out = trn_tensor_new(m, "bmm", nd, shape);
    trn_op_apply(m, &trn__bmm_op, out, a, b, NULL, &args);
    return out;
}

/* --- the losses below: a scalar (1), the mean over `count` terms.
   Forward writes each term into the arena and their mean into out
   (trn__mean_into, as trn_cross_entropy does); backward starts from
   dloss = d(out) / count per term. Targets come in as host arrays and are
   uploaded into an input tensor, in[1] (no gradient), that backward reads. */
static float trn__dloss(trn_model *m, trn_tape_entry *e, double count) {
    float d;
    d = trn__scalar_grad(m, e->out);
    return count > 0.0 ? (float)(d / count) : 0.0f;
}
static trn_tensor *trn__loss_target(trn_model *m, trn_tensor *pred, const float *target, const char *op) {
    trn__not_null(op, m, pred); trn__not_null(op, target, target);
    return trn_input(m, "target", pred->ndim, pred->shape, target);
}

/* cross-entropy with ignore index and label smoothing. in[1] carries the
   int targets (N) in its buffer (ignored rows as -1: the kernels' mark),
   iarg: N, V, Vp, rows counted; farg[0] smoothing. saved[0]: lse (N). */
static void trn__xent_ex_fw(trn_model *m, trn_tape_entry *e) {
    int N = e->iarg[0], V = e->iarg[1], Vp = e->iarg[2];
    float *losses = (float *)trn_arena_alloc(m, sizeof(float) * (size_t)N);
    e->saved[0] = trn_arena_alloc(m, sizeof(float) * (size_t)N);
    m->backend->crossentropy_ex_forward(losses, (float *)e->saved[0], e->in[0]->data, (const int *)e->in[1]->data, N, V,
                                        Vp, e->farg[0]);
    trn__mean_into(m, e->out, losses, (size_t)N, (double)e->iarg[3]);
}
static void trn__xent_ex_bw(trn_model *m, trn_tape_entry *e) {
    m->backend->crossentropy_ex_backward(trn_grad(m, e->in[0]), e->in[0]->data, (const float *)e->saved[0],
                                         (const int *)e->in[1]->data, trn__dloss(m, e, (double)e->iarg[3]), e->iarg[0],
                                         e->iarg[1], e->iarg[2], e->farg[0]);
}
static const trn_op trn__xent_ex_op = TRN__OP2("cross_entropy_ex", trn__xent_ex_fw, trn__xent_ex_bw);
TRNDEF trn_tensor *trn_cross_entropy_ex(trn_model *m, trn_tensor *logits, const int *targets, int n_valid,
                                        int ignore_index, float label_smoothing) {
    int N, Vp, i, counted = 0, one = 1, *ids;
    trn_tensor *out, *tg;
    trn_op_args args;
    trn__not_null("trn_cross_entropy_ex", m, logits); trn__not_null("trn_cross_entropy_ex", targets, targets);
    logits = trn__act(m, logits);
    Vp = TRN__LAST(logits);
    N = (int)(logits->size / (size_t)Vp);
    if (n_valid <= 0 || n_valid > Vp) trn_fatal("trn_cross_entropy_ex: n_valid=%d must be in [1,%d]", n_valid, Vp);
    if (!(label_smoothing >= 0.0f && label_smoothing <= 1.0f))
        trn_fatal("trn_cross_entropy_ex: label_smoothing %g (must be in [0,1])", (double)label_smoothing);
    ids = (int *)trn_alloc(sizeof(int) * (size_t)N, TRN_KIND_TEMP);
    if (!ids) trn_fatal("trn_cross_entropy_ex: %s", trn_error_reason());
    for (i = 0; i < N; i++) {
        if (targets[i] == ignore_index) { ids[i] = -1; continue; }
        if (targets[i] < 0 || targets[i] >= n_valid)
            trn_fatal("trn_cross_entropy_ex: target %d at row %d is outside [0,%d) and is not ignore_index %d", targets[i],
                      i, n_valid, ignore_index);
        ids[i] = targets[i];
        counted++;
    }
    tg = trn_tensor_new_dtype(m, "targets", 1, &N, TRN_F32); /* a carrier of N ints (same size as floats) */
    m->backend->upload(tg->data, ids, sizeof(int) * (size_t)N);
    trn_free(ids);
    memset(&args, 0, sizeof args);
    args.i[0] = N; args.i[1] = n_valid; args.i[2] = Vp; args.i[3] = counted;
    args.f[0] = label_smoothing;
    out = trn_tensor_new_dtype(m, "cross_entropy_ex", 1, &one, TRN_F32);
    trn_op_apply(m, &trn__xent_ex_op, out, logits, tg, NULL, &args);
    return out;
}

/* BCE with logits, L1, Huber: elementwise terms, mean over all of them;
   farg[0]: Huber's delta. Save nothing beyond the target input. */
static void trn__bce_fw(trn_model *m, trn_tape_entry *e) {
    size_t n = e->in[0]->size;
    float *terms = (float *)trn_arena_alloc(m, sizeof(float) * n);
    m->backend->bce_logits_forward(terms, e->in[0]->data, e->in[1]->data, n);
    trn__mean_into(m, e->out, terms, n, (double)n);
}
static void trn__bce_bw(trn_model *m, trn_tape_entry *e) {
    size_t n = e->in[0]->size;
    m->backend->bce_logits_backward(trn_grad(m, e->in[0]), e->in[0]->data, e->in[1]->data, trn__dloss(m, e, (double)n), n);
}
static void trn__l1_fw(trn_model *m, trn_tape_entry *e) {
    size_t n = e->in[0]->size;
    float *terms = (float *)trn_arena_alloc(m, sizeof(float) * n);
    m->backend->l1_forward(terms, e->in[0]->data, e->in[1]->data, n);
    trn__mean_into(m, e->out, terms, n, (double)n);
}
static void trn__l1_bw(trn_model *m, trn_tape_entry *e) {
    size_t n = e->in[0]->size;
    m->backend->l1_backward(trn_grad(m, e->in[0]), e->in[0]->data, e->in[1]->data, trn__dloss(m, e, (double)n), n);
}
static void trn__huber_fw(trn_model *m, trn_tape_entry *e) {
    size_t n = e->in[0]->size;
    float *terms = (float *)trn_arena_alloc(m, sizeof(float) * n);
    m->backend->huber_forward(terms, e->in[0]->data, e->in[1]->data, e->farg[0], n);
    trn__mean_into(m, e->out, terms, n, (double)n);
}
static void trn__huber_bw(trn_model *m, trn_tape_entry *e) {
    size_t n = e->in[0]->size;
    m->backend->huber_backward(trn_grad(m, e->in[0]), e->in[0]->data, e->in[1]->data, e->farg[0],
                               trn__dloss(m, e, (double)n), n);
}
static const trn_op trn__bce_op = TRN__OP2("bce_with_logits", trn__bce_fw, trn__bce_bw);
static const trn_op trn__l1_op = TRN__OP2("l1", trn__l1_fw, trn__l1_bw);
static const trn_op trn__huber_op = TRN__OP2("huber", trn__huber_fw, trn__huber_bw);
static trn_tensor *trn__pointwise_loss(trn_model *m, const trn_op *op, trn_tensor *pred, const float *target,
                                       float arg) {
    int one = 1;
    trn_tensor *tg, *out;
    trn_op_args args;
    pred = trn__act(m, pred);
    tg = trn__loss_target(m, pred, target, op->name);
    memset(&args, 0, sizeof args);
    args.f[0] = arg;
    out = trn_tensor_new_dtype(m, op->name, 1, &one, TRN_F32);
    trn_op_apply(m, op, out, pred, tg, NULL, &args);
    return out;
}
TRNDEF trn_tensor *trn_bce_with_logits(trn_model *m, trn_tensor *logits, const float *targets) {
    return trn__pointwise_loss(m, &trn__bce_op, logits, targets, 0.0f);
}
TRNDEF trn_tensor *trn_l1(trn_model *m, trn_tensor *pred, const float *target) {
    return trn__pointwise_loss(m, &trn__l1_op, pred, target, 0.0f);
}
TRNDEF trn_tensor *trn_huber(trn_model *m, trn_tensor *pred, const float *target, float delta) {
    if (!(delta > 0.0f)) trn_fatal("trn_huber: delta %g (must be > 0)", (double)delta);
    return trn__pointwise_loss(m, &trn__huber_op, pred, target, delta);
}
/* <<ops3 implementation end */

#endif /* TRAIN_OPS_IMPLEMENTATION_DONE */
#endif /* TRAIN_IMPLEMENTATION */
