/* extras/train_generate.h - a companion of train.h: generation with a key/value cache (trn_kv_cache, trn_attention_cached)

   Do this:
      #define TRAIN_IMPLEMENTATION
      #include "train.h"
      #include "extras/train_generate.h"
   in the one C or C++ file that implements train.h; every other file
   includes both plainly. This header's implementation comes with train.h's
   (it records with train.h's private tape helpers), so it needs no macro
   of its own; TRAIN_GENERATE_IMPLEMENTATION is accepted and must sit in
   the same file as TRAIN_IMPLEMENTATION.

   Training never calls it: sampling from a model does. The kernels it
   runs are the backend's (train.h's trn_attention_cached_forward on the
   CPU, train_cuda.h's on a GPU: the backend table is train.h's), so
   nothing in train.h, train_cuda.h or train_nccl.h calls this file. Why a
   companion: docs/DESIGN-notes.md.

   Contents (grep for the anchors):
      >>kvcache     the cache, its memory, attention over it

   License: MIT, as train.h.
*/
#ifndef TRAIN_H_INCLUDED
#error "extras/train_generate.h: include train.h first"
#endif
#ifndef TRAIN_GENERATE_H_INCLUDED
#define TRAIN_GENERATE_H_INCLUDED

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------
   >>kvcache
   Generation with a key/value cache. Causal attention at position p reads
   the keys and values of positions 0..p, and those never change once
   computed; so a generator keeps them. The prompt goes through the model
   once (prefill: T positions), then every new token is a forward of ONE
   position that attends over the cache, instead of re-running the whole
   window for every token (today's cost of sampling without it: T times
   more work per token). Memory: 2 * L * B * max_T * n_kv_head * head_dim
   floats, under its own ledger kind, TRN_KIND_KV_CACHE ("kv cache").

      trn_kv_cache kv;
      trn_kv_cache_init(&kv, &m, L, 1, max_T, n_kv_head, head_dim);
      int g = trn_no_grad(&m);               // inference only
      // a forward over ids[0..T) at positions kv.len .. kv.len+T-1 whose
      // attention layers call trn_attention_cached(&m, &kv, layer, ...),
      // then trn_kv_cache_advance(&kv, T); repeat with T = 1 per token.
      trn_kv_cache_free(&kv); trn_set_grad_enabled(&m, g);

   Positional encodings are the model's business: it must use positions
   kv.len + t (learned position table, RoPE). When kv.len reaches max_T
   the cache is full; absolute positions cannot slide, so a generator then
   resets it and prefills the last part of the context again.
   ------------------------------------------------------------------------ */
typedef struct trn_kv_cache {
    int n_layer, batch, max_T, n_kv_head, head_dim;
    int len;                  /* positions held; the next forward starts here */
    float *k, *v;             /* (L, B, max_T, n_kv_head*head_dim) each,
                                 backend memory (KV_CACHE)                 */
    int dtype;                /* the model's activation dtype              */
    const trn_backend *backend;
} trn_kv_cache;

TRNDEF trn_result trn_kv_cache_init(trn_kv_cache *c, trn_model *m, int n_layer, int batch, int max_T, int n_kv_head,
                                    int head_dim);
TRNDEF void trn_kv_cache_free(trn_kv_cache *c);
TRNDEF void trn_kv_cache_reset(trn_kv_cache *c);         /* len = 0, memory kept */
TRNDEF void trn_kv_cache_advance(trn_kv_cache *c, int T); /* after each forward  */
/* Attention of T new positions (c->len ...) over all cached ones, causal:
   q (B,T,n_head*hs), k and v (B,T,n_kv_head*hs) of the new positions are
   first written into layer `layer`'s cache. n_head a multiple of
   n_kv_head (grouped-query attention: query head h reads kv head
   h / (n_head / n_kv_head)). Returns (B,T,n_head*hs). Inference only: it
   records nothing, and stops the program if asked for a gradient. */
TRNDEF trn_tensor *trn_attention_cached(trn_model *m, trn_kv_cache *c, int layer, trn_tensor *q, trn_tensor *k,
                                        trn_tensor *v, int n_head);
/* the same for a fused projection qkv (B,T,C+2*Ckv) = [q | k | v], as
   trn_attention takes it (GPT-2: Ckv = C) */
TRNDEF trn_tensor *trn_attention_cached_qkv(trn_model *m, trn_kv_cache *c, int layer, trn_tensor *qkv, int n_head);
/* <<kvcache declarations end */

#ifdef __cplusplus
}
#endif
#endif /* TRAIN_GENERATE_H_INCLUDED */

#if defined(TRAIN_GENERATE_IMPLEMENTATION) && !defined(TRAIN_IMPLEMENTATION)
#error "extras/train_generate.h: TRAIN_GENERATE_IMPLEMENTATION needs TRAIN_IMPLEMENTATION in the same file (define it before train.h)"
#endif
#ifdef TRAIN_IMPLEMENTATION
#ifndef TRAIN_IMPLEMENTATION_DONE
#error "extras/train_generate.h: train.h's implementation is not in this file (define TRAIN_IMPLEMENTATION before the first #include \"train.h\")"
#endif
#ifndef TRAIN_GENERATE_IMPLEMENTATION_DONE
#define TRAIN_GENERATE_IMPLEMENTATION_DONE

/* >>kvcache: the key/value cache (generation) ------------------------------ */
TRNDEF trn_result trn_kv_cache_init(trn_kv_cache *c, trn_model *m, int n_layer, int batch, int max_T, int n_kv_head,
                                    int head_dim) {
    size_t n;
    if (!c || !m) return trn_fail(TRN_ERR_INVALID, "trn_kv_cache_init: cache or model is NULL");
    memset(c, 0, sizeof *c);
    if (n_layer <= 0 || batch <= 0 || max_T <= 0 || n_kv_head <= 0 || head_dim <= 0)
        return trn_fail(TRN_ERR_INVALID, "trn_kv_cache_init: L=%d B=%d max_T=%d n_kv_head=%d head_dim=%d (all must be > 0)",
                        n_layer, batch, max_T, n_kv_head, head_dim);
    n = (size_t)n_layer * batch * max_T * n_kv_head * head_dim * trn_dtype_size(m->act_dtype); /* bytes */
    c->backend = m->backend;
    c->dtype = m->act_dtype;
    c->k = (float *)m->backend->alloc(n, TRN_KIND_KV_CACHE);
    c->v = c->k ? (float *)m->backend->alloc(n, TRN_KIND_KV_CACHE) : NULL;
    if (!c->k || !c->v) {
        trn_result r = trn_fail(TRN_ERR_NOMEM, "trn_kv_cache_init: %zu bytes: %s", 2 * n, trn_error_reason());
        trn_kv_cache_free(c);
        return r;
    }
    c->n_layer = n_layer; c->batch = batch; c->max_T = max_T; c->n_kv_head = n_kv_head; c->head_dim = head_dim;
    return TRN_OK;
}
TRNDEF void trn_kv_cache_free(trn_kv_cache *c) {
    if (!c) return;
    if (c->k) c->backend->free(c->k);
    if (c->v) c->backend->free(c->v);
    memset(c, 0, sizeof *c);
}
TRNDEF void trn_kv_cache_reset(trn_kv_cache *c) { if (c) c->len = 0; }
TRNDEF void trn_kv_cache_advance(trn_kv_cache *c, int T) {
    if (!c || T < 0 || c->len + T > c->max_T) trn_fatal("trn_kv_cache_advance: %d + %d positions exceed the cache's %d", c ? c->len : 0, T, c ? c->max_T : 0);
    c->len += T;
}

/* the op behind both entry points: q, k, v are column offsets into rows
   of the given strides (fused qkv: one tensor, three offsets) */
static trn_tensor *trn__attention_cached(trn_model *m, trn_kv_cache *c, int layer, const char *op, trn_tensor *tq,
                                         const float *q, int qs, const float *k, const float *v, int kvs, int B, int T,
                                         int n_head, trn_tensor *tk, trn_tensor *tv) {
    int hs = c->head_dim, shape[3];
    size_t off = (size_t)layer * c->batch * c->max_T * c->n_kv_head * hs;
    float *att;
    trn_tensor *out;
    if ((tq->requires_grad || (tk && tk->requires_grad) || (tv && tv->requires_grad)) && m->grad_enabled)
        trn_fatal("%s: the cache is for inference; call trn_no_grad(m) first", op);
    if (layer < 0 || layer >= c->n_layer || B != c->batch || n_head <= 0 || n_head % c->n_kv_head)
        trn_fatal("%s: layer %d of %d, batch %d (cache: %d), n_head %d (must be a multiple of n_kv_head %d)", op, layer,
                  c->n_layer, B, c->batch, n_head, c->n_kv_head);
    if (c->len + T > c->max_T)
        trn_fatal("%s: %d cached + %d new positions exceed the cache's %d (reset it and prefill again)", op, c->len, T,
                  c->max_T);
    if (!m->backend->attention_kv_forward) trn_fatal("%s: backend %s has no cached attention", op, m->backend->name);
    shape[0] = B; shape[1] = T; shape[2] = n_head * hs;
    out = trn_tensor_new(m, "attention_cached", 3, shape);
    att = (float *)trn_arena_alloc(m, trn_dtype_size(c->dtype) * (size_t)B * n_head * T * (c->len + T));
    m->backend->attention_kv_forward(out->data, att, q, qs, k, v, kvs, TRN__AT(c->k, off, c->dtype),
                                     TRN__AT(c->v, off, c->dtype), B, T, c->len, c->max_T,
                                     n_head, c->n_kv_head, hs);
    return out;
}

TRNDEF trn_tensor *trn_attention_cached(trn_model *m, trn_kv_cache *c, int layer, trn_tensor *q, trn_tensor *k,
                                        trn_tensor *v, int n_head) {
    int Ckv;
    trn__not_null("trn_attention_cached", m, c); trn__not_null("trn_attention_cached", q, k); trn__not_null("trn_attention_cached", v, v);
    Ckv = c->n_kv_head * c->head_dim;
    q = trn__act(m, q); k = trn__act(m, k); v = trn__act(m, v);
    trn__need(q->ndim == 3 && TRN__LAST(q) == n_head * c->head_dim, "trn_attention_cached", q, q,
              "q must be (B,T,n_head*head_dim)");
    trn__need(k->ndim == 3 && v->ndim == 3 && TRN__LAST(k) == Ckv && TRN__LAST(v) == Ckv && k->shape[0] == q->shape[0] &&
              k->shape[1] == q->shape[1] && memcmp(k->shape, v->shape, sizeof(int) * 3) == 0,
              "trn_attention_cached", k, v, "k and v must be (B,T,n_kv_head*head_dim) like q's B,T");
    return trn__attention_cached(m, c, layer, "trn_attention_cached", q, q->data, TRN__LAST(q), k->data, v->data, Ckv,
                                 q->shape[0], q->shape[1], n_head, k, v);
}

TRNDEF trn_tensor *trn_attention_cached_qkv(trn_model *m, trn_kv_cache *c, int layer, trn_tensor *qkv, int n_head) {
    int C, Ckv, W;
    trn__not_null("trn_attention_cached_qkv", m, c); trn__not_null("trn_attention_cached_qkv", qkv, qkv);
    C = n_head * c->head_dim; Ckv = c->n_kv_head * c->head_dim; W = C + 2 * Ckv;
    trn__need(qkv->ndim == 3 && TRN__LAST(qkv) == W, "trn_attention_cached_qkv", qkv, qkv,
              "qkv must be (B,T,n_head*hs + 2*n_kv_head*hs)");
    qkv = trn__act(m, qkv);
    return trn__attention_cached(m, c, layer, "trn_attention_cached_qkv", qkv, qkv->data, W, TRN__AT(qkv->data, C, qkv->dtype),
                                 TRN__AT(qkv->data, C + Ckv, qkv->dtype), W, qkv->shape[0], qkv->shape[1], n_head, NULL, NULL);
}
/* <<kvcache implementation end */

#endif /* TRAIN_GENERATE_IMPLEMENTATION_DONE */
#endif /* TRAIN_IMPLEMENTATION */
