// llama - a Llama-family decoder trained end to end with train.h: RMSNorm,
// rotary position embeddings (RoPE), a SwiGLU MLP, grouped-query attention
// and an untied output head; the weights of a Hugging Face Llama load with
// --init. Same flags, data, validation, checkpoints, resume, plot, JSONL log
// and sampling as examples/gpt2 (the parts they share are in
// examples/common.h); examples/llama_cuda.cu is the same file on a GPU.
// build: -pthread
//
// What differs from GPT-2, block by block (Touvron et al. 2023):
//   GPT-2:  x + attn(layernorm(x))          x + W2 gelu(W1 layernorm(x))
//   Llama:  x + attn(rope(rmsnorm(x)))      x + W2 (silu(W1 h) * W3 h),  h = rmsnorm(x)
// no biases anywhere, no position table (RoPE turns q and k by the token's
// position instead), fewer key/value heads than query heads (each group of
// query heads shares one), and a separate matrix for the output logits
// (or, tied as in Llama 3.2 1B, the embedding itself: one tensor).
//
// Run it (learns the kit's own text, byte by byte, like examples/gpt2):
//
//     ./build.sh && ./examples/llama
//
// Other things to try:
//
//     ./examples/llama --data my.txt --steps 2000
//     ./examples/llama --init DIR --steps 0 --data shard.bin   a Hugging Face Llama:
//                      DIR/config.json + DIR/model.safetensors, or its shards
//                      (model.safetensors.index.json); see docs/huggingface.md
//     ./examples/llama --init DIR --data my.txt --tokenizer FILE   text through a
//                      Hugging Face tokenizer.json (default: DIR/tokenizer.json;
//                      the text is one document, its BOS first, as tokenizer(text))
//     ./examples/llama --resume runs/llama                  continue a run
//
// --init reads Hugging Face's names (model.layers.0.self_attn.q_proj.weight,
// ...). The model here packs q, k and v into one matrix (one matmul; the
// attention op takes them packed), so --init stacks HF's three matrices.
// HF's RoPE is the "rotate-half" form, which train.h's trn_rope computes:
// HF checkpoints need no permutation (the permutation in HF's conversion
// script turns Meta's interleaved-pair weights into this form).
//
// Sections: >>config (presets) >>model >>weights (--init, saving) >>main
// (examples/common.h's run_main runs it, as it runs examples/gpt2).
#define TRAIN_IMPLEMENTATION
#include "train.h"
#include "extras/train_data.h" // tokenizers, token shards, the batch loader
#include "extras/train_loop.h" // progress/ETA, CSV, TensorBoard, spike guard, early stop
#include "extras/train_run.h"  // run directories: keep-K, resume, keep-best, async saves
#include "extras/train_generate.h" // sampling with a key/value cache
#include "extras/train_json.h" // config.json (--init DIR)

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

// The backend: train_cuda.h's when this file is built as llama_cuda.cu
// (run_main has initialized this rank's GPU before it creates the model),
// else the CPU's (NULL)
#if defined(TRN_USE_CUDA) && !defined(TRAIN_CUDA_IMPLEMENTATION)
#define TRAIN_CUDA_IMPLEMENTATION
#endif
#ifdef TRN_USE_CUDA
#include "train_cuda.h"
#define llama_backend() trn_cuda_backend()
#else
#define llama_backend() ((const trn_backend *)NULL)
#endif

// The run's ranks (train_nccl.h), for main only: one process without a
// launcher; over TCP between CPU processes with one (no --shard)
#ifndef LLAMA_NO_MAIN
#define TRAIN_NCCL_CPU_ONLY
#define TRAIN_NCCL_IMPLEMENTATION
#include "train_nccl.h"
#endif

// errors, flags, data, the log, the plot, sampling, the loop's extras, and
// (with train_nccl.h) the whole run: run_main
#define EX_PROG "llama"
#include "common.h"

// ===========================================================================
// >>config: the shape of a Llama; presets
// ===========================================================================

typedef struct llama_config {
    int n_layer;      // L: decoder blocks                     num_hidden_layers
    int n_head;       // NH: query heads                        num_attention_heads
    int n_kv_head;    // NKV: key/value heads, divides NH        num_key_value_heads
    int n_embd;       // C: channels of the residual stream     hidden_size
    int head_dim;     // hs: channels per head (C / NH usually)  head_dim
    int ffn_hidden;   // F: width of the SwiGLU MLP             intermediate_size
    int block_size;   // the longest context trained for        max_position_embeddings
    int vocab_size;   // V: tokens the model predicts           vocab_size
    int padded_vocab; // Vp: rows of the embedding and head (V rounded up to 128)
    float rope_theta; // RoPE base                              rope_theta
    float norm_eps;   // RMSNorm epsilon                        rms_norm_eps
    int tied;         // 1: the head IS the embedding (one tensor) tie_word_embeddings
    trn_rope_scaling rope; // RoPE's frequency scaling (train.h)   rope_scaling / rope_parameters
} llama_config;

typedef struct preset {
    const char *name;
    llama_config cfg;
    int batch, seq; // default micro-batch and sequence length
    float lr;       // default peak learning rate
    const char *what;
} preset;

static const preset PRESETS[] = {
    {"mini", {4, 4, 2, 192, 48, 512, 256, 256, 256, 10000.0f, 1e-5f, 0, {0, 0.0f, 0.0f, 0.0f, 0}}, 16, 128, 2e-3f,
     "byte-level, 1.6M parameters: learns the kit's text in about a minute on a CPU"},
    {"tiny", {2, 2, 1, 32, 16, 64, 64, 256, 256, 10000.0f, 1e-5f, 0, {0, 0.0f, 0.0f, 0.0f, 0}}, 4, 32, 3e-3f, "byte-level, 40K parameters: for tests"},
    {"tinyllama-1.1b", {22, 32, 4, 2048, 64, 5632, 2048, 32000, 32000, 10000.0f, 1e-5f, 0, {0, 0.0f, 0.0f, 0.0f, 0}}, 4, 64, 4e-4f,
     "TinyLlama 1.1B's shape (use with --init)"},
};
#define N_PRESETS ((int)(sizeof PRESETS / sizeof PRESETS[0]))

static const preset *find_preset(const char *name) {
    for (int i = 0; i < N_PRESETS; i++)
        if (strcmp(PRESETS[i].name, name) == 0) return &PRESETS[i];
    return NULL;
}

// the scalings trn_rope_scaled accepts (it stops the program on others)
static int rope_ok(const trn_rope_scaling *s) {
    if (s->type == TRN_ROPE_DEFAULT) return 1;
    if (s->type < TRN_ROPE_DEFAULT || s->type > TRN_ROPE_LLAMA3 || !(s->factor > 0.0f && s->factor < 1e6f)) return 0;
    if (s->type != TRN_ROPE_LINEAR && s->original_max_pos <= 0) return 0;
    return s->type != TRN_ROPE_LLAMA3 || (s->low_freq_factor > 0.0f && s->high_freq_factor > s->low_freq_factor);
}
static const char *ROPE_NAMES[] = {"default", "linear", "dynamic", "llama3"};

static int config_ok(const llama_config *c) {
    return c->n_layer > 0 && c->n_head > 0 && c->n_kv_head > 0 && c->n_head % c->n_kv_head == 0 && c->n_embd > 0 &&
           c->head_dim > 0 && c->head_dim % 2 == 0 && c->ffn_hidden > 0 && c->block_size > 0 && c->vocab_size > 0 &&
           c->padded_vocab >= c->vocab_size && c->rope_theta > 1.0f && c->norm_eps > 0.0f && (c->tied == 0 || c->tied == 1) &&
           rope_ok(&c->rope);
}

// ===========================================================================
// >>model
// ===========================================================================

typedef struct llama_block {
    trn_tensor *attn_norm; // (C)                 input_layernorm
    trn_tensor *wqkv;      // ((NH+2NKV)*hs, C)   q_proj, k_proj, v_proj stacked
    trn_tensor *wo;        // (C, NH*hs)          o_proj
    trn_tensor *mlp_norm;  // (C)                 post_attention_layernorm
    trn_tensor *w_gate;    // (F, C)              mlp.gate_proj (W1, through SiLU)
    trn_tensor *w_up;      // (F, C)              mlp.up_proj   (W3, the linear half)
    trn_tensor *w_down;    // (C, F)              mlp.down_proj (W2)
    int n_head, n_kv_head;   // a recompute region sees only its block:
    float rope_theta, eps;   // the config's heads, RoPE base, RMSNorm epsilon
    trn_rope_scaling rope;   // and RoPE's scaling
} llama_block;

typedef struct llama {
    llama_config cfg;
    trn_model m;
    trn_tensor *embed;   // (Vp, C)  model.embed_tokens
    llama_block *layers; // L blocks
    trn_tensor *norm;    // (C)      model.norm
    trn_tensor *head;    // (Vp, C)  lm_head; tied: the same tensor as embed
    int recompute;       // 1: each block is a recompute region (--recompute)
} llama;

static trn_result llama_create(llama *g, const llama_config *cfg, const trn_backend *backend) {
    memset(g, 0, sizeof *g);
    g->cfg = *cfg;
    int L = cfg->n_layer, C = cfg->n_embd, hs = cfg->head_dim, F = cfg->ffn_hidden;
    int QKV = (cfg->n_head + 2 * cfg->n_kv_head) * hs;
    trn_result r = trn_model_init(&g->m, backend);
    if (r != TRN_OK) return r;
    trn_model *m = &g->m;
    char n[96]; // a parameter's name: HF's, so HF's files load by name
    g->embed = trn_param2(m, "model.embed_tokens.weight", cfg->padded_vocab, C);
    g->layers = (llama_block *)calloc((size_t)L, sizeof(llama_block));
    if (!g->layers) return trn_fail(TRN_ERR_NOMEM, "llama: out of memory for %d blocks", L);
    for (int l = 0; l < L; l++) {
        llama_block *b = &g->layers[l];
        b->n_head = cfg->n_head, b->n_kv_head = cfg->n_kv_head, b->rope_theta = cfg->rope_theta, b->eps = cfg->norm_eps;
        b->rope = cfg->rope;
#define LLAMA_P(field, what, ...) \
    (snprintf(n, sizeof n, "model.layers.%d.%s", l, what), b->field = trn_param(m, n, __VA_ARGS__))
        int sC[1] = {C}, sqkv[2] = {QKV, C}, so[2] = {C, cfg->n_head * hs}, sup[2] = {F, C}, sdown[2] = {C, F};
        LLAMA_P(attn_norm, "input_layernorm.weight", 1, sC);
        LLAMA_P(wqkv, "self_attn.qkv_proj.weight", 2, sqkv);
        LLAMA_P(wo, "self_attn.o_proj.weight", 2, so);
        LLAMA_P(mlp_norm, "post_attention_layernorm.weight", 1, sC);
        LLAMA_P(w_gate, "mlp.gate_proj.weight", 2, sup);
        LLAMA_P(w_up, "mlp.up_proj.weight", 2, sup);
        LLAMA_P(w_down, "mlp.down_proj.weight", 2, sdown);
#undef LLAMA_P
    }
    g->norm = trn_param1(m, "model.norm.weight", C);
    // Tied (tie_word_embeddings, e.g. Llama 3.2 1B, SmolLM): no second
    // matrix. The head is the embedding tensor itself, so its one gradient
    // buffer collects both uses (the embedding's scatter-add of rows and the
    // head's matmul), AdamW updates it once, and a checkpoint holds it once,
    // as transformers' tie_weights() and examples/gpt2's wte do.
    g->head = cfg->tied ? g->embed : trn_param2(m, "lm_head.weight", cfg->padded_vocab, C);
    return trn_model_alloc(m);
}

static void llama_free(llama *g) {
    trn_model_free(&g->m);
    free(g->layers);
    memset(g, 0, sizeof *g);
}

// Matrices ~ N(0, 0.02) (HF's initializer_range); the two that write into
// the residual stream (o_proj, down_proj) 0.02/sqrt(2L), as GPT-2 does, so
// the residual's variance does not grow with depth; RMSNorm gains 1. The
// padding rows of embed and head stay 0.
static void llama_init_weights(llama *g, uint64_t seed) {
    trn_rng rng;
    trn_model *m = &g->m;
    float std = 0.02f, std_res = 0.02f / sqrtf(2.0f * (float)g->cfg.n_layer);
    trn_rng_seed(&rng, seed);
    for (int i = 0; i < m->n_params; i++) {
        trn_tensor *p = m->params[i];
        if (p->ndim == 1) trn_init_const(m, p, 1.0f);
        else trn_init_normal(m, p, 0.0f, strstr(p->name, "o_proj") || strstr(p->name, "down_proj") ? std_res : std, &rng);
    }
    int V = g->cfg.vocab_size, Vp = g->cfg.padded_vocab, C = g->cfg.n_embd;
    if (Vp > V) {
        float *zeros = (float *)calloc((size_t)(Vp - V) * C, sizeof(float));
        if (!zeros) trn_fatal("llama_init_weights: out of memory");
        trn_write_range(m, g->embed, (size_t)V * C, zeros, (size_t)(Vp - V) * C);
        if (g->head != g->embed) trn_write_range(m, g->head, (size_t)V * C, zeros, (size_t)(Vp - V) * C);
        free(zeros);
    }
}

// One decoder block, x (B,T,C) -> (B,T,C). Its signature is a
// trn_region_fn so that --recompute can hand it to trn_recompute.
static trn_tensor *llama_block_forward(trn_model *m, trn_tensor *x, void *user) {
    llama_block *b = (llama_block *)user;
    // x = x + o_proj(attention(rope(qkv_proj(rmsnorm(x)))))
    trn_tensor *h = trn_rmsnorm(m, x, b->attn_norm, b->eps);               // (B,T,C)
    h = trn_linear(m, h, b->wqkv, NULL);                                   // (B,T,(NH+2NKV)hs)
    h = trn_rope_scaled(m, h, b->n_head, b->n_kv_head, b->rope_theta, &b->rope, 0); // q, k turned by position
    h = trn_attention_gqa(m, h, b->n_head, b->n_kv_head, 1);               // (B,T,NH*hs) causal
    x = trn_add_inplace(m, x, trn_linear(m, h, b->wo, NULL));              // (B,T,C)
    // x = x + down(silu(gate(h)) * up(h)),  h = rmsnorm(x)
    h = trn_rmsnorm(m, x, b->mlp_norm, b->eps);                            // (B,T,C)
    trn_tensor *gate = trn_silu(m, trn_linear(m, h, b->w_gate, NULL));    // (B,T,F)
    h = trn_mul(m, gate, trn_linear(m, h, b->w_up, NULL));                 // (B,T,F)
    return trn_add_inplace(m, x, trn_linear(m, h, b->w_down, NULL));       // (B,T,C)
}

// ids (B,T) -> logits (B,T,Vp); every op records itself on the tape (when
// m->grad_enabled). Call trn_reset(&g->m) before. With --recompute a block
// keeps only its input for backward and runs again inside backward.
static trn_tensor *llama_forward(llama *g, const int *ids, int B, int T) {
    trn_model *m = &g->m;
    const llama_config *c = &g->cfg;
    trn_tensor *x = trn_embedding(m, g->embed, ids, B, T);                    // (B,T,C)
    for (int l = 0; l < c->n_layer; l++)
        x = g->recompute ? trn_recompute(m, llama_block_forward, &g->layers[l], x)
                         : llama_block_forward(m, x, &g->layers[l]);
    x = trn_rmsnorm(m, x, g->norm, c->norm_eps);
    return trn_linear(m, x, g->head, NULL);                                    // (B,T,Vp)
}

// The forward pass for generation, with a key/value cache (train.h's
// >>kvcache): T new tokens ids (B,T) at positions kv->len .. kv->len+T-1
// (RoPE turns q and k by those positions); each block's attention appends
// their keys and values to its layer of the cache and attends over all of
// it, so a new token costs one position. Returns the logits of the last
// position only, (B,1,Vp). Inference only: call with the tape off.
static trn_tensor *llama_forward_cached(llama *g, trn_kv_cache *kv, const int *ids, int B, int T) {
    trn_model *m = &g->m;
    const llama_config *c = &g->cfg;
    trn_tensor *x = trn_embedding(m, g->embed, ids, B, T);                    // (B,T,C)
    for (int l = 0; l < c->n_layer; l++) { // the block of llama_forward, attention over the cache
        llama_block *b = &g->layers[l];
        trn_tensor *h = trn_rmsnorm(m, x, b->attn_norm, c->norm_eps);
        h = trn_linear(m, h, b->wqkv, NULL);
        h = trn_rope_scaled(m, h, c->n_head, c->n_kv_head, c->rope_theta, &c->rope, kv->len); // absolute positions
        h = trn_attention_cached_qkv(m, kv, l, h, c->n_head);                 // (B,T,NH*hs)
        x = trn_add(m, x, trn_linear(m, h, b->wo, NULL));
        h = trn_rmsnorm(m, x, b->mlp_norm, c->norm_eps);
        trn_tensor *gate = trn_silu(m, trn_linear(m, h, b->w_gate, NULL));
        h = trn_mul(m, gate, trn_linear(m, h, b->w_up, NULL));
        x = trn_add(m, x, trn_linear(m, h, b->w_down, NULL));
    }
    trn_kv_cache_advance(kv, T);
    trn_tensor *last = trn_last_position(m, x); // x[:, T-1, :], (B,1,C)
    last = trn_rmsnorm(m, last, g->norm, c->norm_eps);
    return trn_linear(m, last, g->head, NULL);                                 // (B,1,Vp)
}

// the forwards as examples/common.h's sampler calls them
static trn_tensor *llama_logits(void *g, const int *ids, int B, int T) { return llama_forward((llama *)g, ids, B, T); }
static trn_tensor *llama_logits_cached(void *g, trn_kv_cache *kv, const int *ids, int B, int T) {
    return llama_forward_cached((llama *)g, kv, ids, B, T);
}

// mean cross-entropy of the next token over the V real classes (scalar)
static trn_tensor *llama_loss(llama *g, const int *x, const int *y, int B, int T) {
    return trn_cross_entropy(&g->m, llama_forward(g, x, B, T), y, g->cfg.vocab_size);
}

// ===========================================================================
// >>weights: --init from a Hugging Face Llama or a file written here
// ===========================================================================

static void config_to_meta(const llama_config *c, trn_meta *meta) {
    trn_meta_set_u64(meta, "llama.n_layer", (uint64_t)c->n_layer);
    trn_meta_set_u64(meta, "llama.n_head", (uint64_t)c->n_head);
    trn_meta_set_u64(meta, "llama.n_kv_head", (uint64_t)c->n_kv_head);
    trn_meta_set_u64(meta, "llama.n_embd", (uint64_t)c->n_embd);
    trn_meta_set_u64(meta, "llama.head_dim", (uint64_t)c->head_dim);
    trn_meta_set_u64(meta, "llama.ffn_hidden", (uint64_t)c->ffn_hidden);
    trn_meta_set_u64(meta, "llama.block_size", (uint64_t)c->block_size);
    trn_meta_set_u64(meta, "llama.vocab_size", (uint64_t)c->vocab_size);
    trn_meta_set_u64(meta, "llama.padded_vocab", (uint64_t)c->padded_vocab);
    trn_meta_set_f64(meta, "llama.rope_theta", c->rope_theta);
    trn_meta_set_f64(meta, "llama.norm_eps", c->norm_eps);
    trn_meta_set_u64(meta, "llama.tied", (uint64_t)c->tied);
    if (c->rope.type != TRN_ROPE_DEFAULT) { // a scaled RoPE; absent: plain
        trn_meta_set_u64(meta, "llama.rope_type", (uint64_t)c->rope.type);
        trn_meta_set_f64(meta, "llama.rope_factor", c->rope.factor);
        trn_meta_set_f64(meta, "llama.rope_low_freq_factor", c->rope.low_freq_factor);
        trn_meta_set_f64(meta, "llama.rope_high_freq_factor", c->rope.high_freq_factor);
        trn_meta_set_u64(meta, "llama.rope_original_max_pos", (uint64_t)c->rope.original_max_pos);
    }
}

// the model's shape from a safetensors file's metadata (a file written
// here); 0 when it has none
static int config_from_st(const trn_safetensors *f, llama_config *c) {
    const char *theta = trn_safetensors_meta(f, "llama.rope_theta"), *eps = trn_safetensors_meta(f, "llama.norm_eps");
    if (st_meta_long(f, "llama.n_layer") < 0 || !theta || !eps) return 0;
    c->n_layer = (int)st_meta_long(f, "llama.n_layer");
    c->n_head = (int)st_meta_long(f, "llama.n_head");
    c->n_kv_head = (int)st_meta_long(f, "llama.n_kv_head");
    c->n_embd = (int)st_meta_long(f, "llama.n_embd");
    c->head_dim = (int)st_meta_long(f, "llama.head_dim");
    c->ffn_hidden = (int)st_meta_long(f, "llama.ffn_hidden");
    c->block_size = (int)st_meta_long(f, "llama.block_size");
    c->vocab_size = (int)st_meta_long(f, "llama.vocab_size");
    c->padded_vocab = (int)st_meta_long(f, "llama.padded_vocab");
    c->rope_theta = (float)atof(theta);
    c->norm_eps = (float)atof(eps);
    long tied = st_meta_long(f, "llama.tied"); // absent (files before ties): untied
    c->tied = tied == 1;
    if (tied > 1) c->tied = -1; // config_ok refuses it
    memset(&c->rope, 0, sizeof c->rope);
    long rt = st_meta_long(f, "llama.rope_type");
    if (rt > 0) {
        const char *fa = trn_safetensors_meta(f, "llama.rope_factor"), *lo = trn_safetensors_meta(f, "llama.rope_low_freq_factor"),
                   *hi = trn_safetensors_meta(f, "llama.rope_high_freq_factor");
        c->rope.type = rt <= TRN_ROPE_LLAMA3 ? (int)rt : -1; // -1: config_ok refuses it
        c->rope.factor = fa ? (float)atof(fa) : 0.0f;
        c->rope.low_freq_factor = lo ? (float)atof(lo) : 0.0f;
        c->rope.high_freq_factor = hi ? (float)atof(hi) : 0.0f;
        c->rope.original_max_pos = (int)st_meta_long(f, "llama.rope_original_max_pos");
    }
    return 1;
}

// config.json is read strictly (train.h's JSON reader): a file that is not
// JSON, a key of the wrong type, a fraction or an out-of-range number where
// a count belongs, a key given twice: an error naming the file and the key.
// Optional keys may be absent or null (then the default of transformers'
// LlamaConfig).
static trn_result opt_int(trn_json_value obj, const char *key, int64_t lo, int64_t hi, int dflt, int *out) {
    int64_t v = 0;
    trn_json_value k = trn_json_key(obj, key);
    if (!k.twice && (!k.at || trn_json_typeof(k) == TRN_JSON_NULL)) return *out = dflt, TRN_OK;
    trn_result r = trn_json_int(k, lo, hi, &v);
    if (r == TRN_OK) *out = (int)v;
    return r;
}
static trn_result opt_float(trn_json_value obj, const char *key, float dflt, float *out) {
    double v;
    trn_json_value k = trn_json_key(obj, key);
    if (!k.twice && (!k.at || trn_json_typeof(k) == TRN_JSON_NULL)) return *out = dflt, TRN_OK;
    trn_result r = trn_json_number(k, &v);
    if (r == TRN_OK && !(fabs(v) < 3e38)) r = trn_fail(TRN_ERR_FORMAT, "%s: '%s' = %g is out of a float's range", obj.doc->name, key, v);
    if (r == TRN_OK) *out = (float)v;
    return r;
}
static trn_result opt_bool(trn_json_value obj, const char *key, int dflt, int *out) {
    trn_json_value k = trn_json_key(obj, key);
    if (!k.twice && (!k.at || trn_json_typeof(k) == TRN_JSON_NULL)) return *out = dflt, TRN_OK;
    return trn_json_bool(k, out);
}

// RoPE as transformers writes it: 4.x "rope_scaling": {"rope_type" (or
// "type"): ..., "factor": ...} beside a top-level "rope_theta"; 5.x
// "rope_parameters": {"rope_type": ..., "rope_theta": ..., ...}. Llama 3.1's
// llama3 adds low_freq_factor, high_freq_factor and
// original_max_position_embeddings; dynamic scales past
// max_position_embeddings, so the context it trains and samples grows to
// factor x that. A type not computed here is refused by name.
static trn_result rope_from_hf(trn_json_value root, const char *path, llama_config *c) {
    const char *which = "rope_parameters";
    trn_json_value o = trn_json_key(root, which);
    if (!o.at || trn_json_typeof(o) == TRN_JSON_NULL) o = trn_json_key(root, which = "rope_scaling");
    memset(&c->rope, 0, sizeof c->rope);
    if (!o.twice && (!o.at || trn_json_typeof(o) == TRN_JSON_NULL)) return TRN_OK; // plain RoPE
    if (o.twice || trn_json_typeof(o) != TRN_JSON_OBJECT) return trn_fail(TRN_ERR_FORMAT, "%s: %s is not an object", path, which);
    char type[32] = "";
    trn_json_value t = trn_json_key(o, "rope_type");
    if (!t.at) t = trn_json_key(o, "type");
    trn_result r = trn_json_string(t, type, sizeof type);
    if (r != TRN_OK) return trn_fail(TRN_ERR_FORMAT, "%s: %s needs a \"rope_type\" string", path, which);
    int k = -1;
    for (int i = 0; i < 4; i++)
        if (!strcmp(type, ROPE_NAMES[i])) k = i;
    if (k < 0)
        return trn_fail(TRN_ERR_FORMAT, "%s: %s: rope_type \"%s\" is not supported (default, linear, dynamic, llama3 are)",
                        path, which, type);
    c->rope.type = k;
    if ((r = opt_float(o, "rope_theta", c->rope_theta, &c->rope_theta)) != TRN_OK) return r;
    if (k == TRN_ROPE_DEFAULT) return TRN_OK;
    if ((r = opt_float(o, "factor", 0.0f, &c->rope.factor)) != TRN_OK) return r;
    if (k == TRN_ROPE_LLAMA3) {
        if ((r = opt_float(o, "low_freq_factor", 0.0f, &c->rope.low_freq_factor)) != TRN_OK ||
            (r = opt_float(o, "high_freq_factor", 0.0f, &c->rope.high_freq_factor)) != TRN_OK ||
            (r = opt_int(o, "original_max_position_embeddings", 1, 1 << 30, 0, &c->rope.original_max_pos)) != TRN_OK)
            return r;
    } else if (k == TRN_ROPE_DYNAMIC) {
        c->rope.original_max_pos = c->block_size;
        if (c->rope.factor > 1.0f && c->rope.factor < 1024.0f) {
            if ((double)c->block_size * c->rope.factor > (double)(1 << 30))
                return trn_fail(TRN_ERR_FORMAT, "%s: %s: max_position_embeddings %d x factor %g is over 2^30 positions",
                                path, which, c->block_size, (double)c->rope.factor);
            c->block_size = (int)(c->block_size * c->rope.factor);
        }
    }
    if (!rope_ok(&c->rope))
        return trn_fail(TRN_ERR_FORMAT, "%s: %s: rope_type %s needs factor > 0%s", path, which, type,
                        k == TRN_ROPE_LLAMA3 ? ", 0 < low_freq_factor < high_freq_factor and original_max_position_embeddings > 0" : "");
    return TRN_OK;
}

// Hugging Face's config.json -> llama_config; TRN_ERR_FORMAT for what this
// model does not compute (another activation, a RoPE type, biases). The
// parsed document (path names it in errors) -> *c; config_from_hf below
// reads the file first. (tests/fuzz_config.c drives this one directly.)
static trn_result config_from_hf_doc(const trn_json *doc, const char *path, llama_config *c) {
    trn_result r = TRN_OK;
    trn_json_value root = trn_json_root(doc);
    memset(c, 0, sizeof *c);
    char act[32] = "silu";
    int attn_bias = 0, mlp_bias = 0;
    int64_t v;
    const int64_t BIG = 1 << 30;
    if (trn_json_typeof(root) != TRN_JSON_OBJECT) r = trn_fail(TRN_ERR_FORMAT, "%s: not a JSON object", path);
#define NEED(key, lo, hi, field) \
    if (r == TRN_OK && (r = trn_json_int(trn_json_key(root, key), lo, hi, &v)) == TRN_OK) c->field = (int)v
    NEED("num_hidden_layers", 1, 100000, n_layer);
    NEED("num_attention_heads", 1, 1 << 20, n_head);
    NEED("hidden_size", 1, BIG, n_embd);
    NEED("intermediate_size", 1, BIG, ffn_hidden);
    NEED("vocab_size", 1, BIG, vocab_size);
#undef NEED
    if (r == TRN_OK) r = opt_int(root, "num_key_value_heads", 1, 1 << 20, c->n_head, &c->n_kv_head); // absent: multi-head
    if (r == TRN_OK) r = opt_int(root, "head_dim", 1, BIG, c->n_embd / c->n_head, &c->head_dim);
    if (r == TRN_OK) r = opt_int(root, "max_position_embeddings", 1, BIG, 2048, &c->block_size);
    if (r == TRN_OK) r = opt_float(root, "rope_theta", 10000.0f, &c->rope_theta);
    if (r == TRN_OK) r = opt_float(root, "rms_norm_eps", 1e-6f, &c->norm_eps);
    if (r == TRN_OK && trn_json_has(root, "tie_word_embeddings")) r = opt_bool(root, "tie_word_embeddings", 0, &c->tied);
    else c->tied = -1; // absent: decided by the file (init_inspect)
    if (r == TRN_OK && trn_json_has(root, "hidden_act")) r = trn_json_string(trn_json_key(root, "hidden_act"), act, sizeof act);
    if (r == TRN_OK) r = opt_bool(root, "attention_bias", 0, &attn_bias);
    if (r == TRN_OK) r = opt_bool(root, "mlp_bias", 0, &mlp_bias);
    if (r == TRN_OK) c->padded_vocab = pad_vocab(c->vocab_size);
    llama_config sizes;
    if (r != TRN_OK)
        ;
    else if (strcmp(act, "silu") != 0)
        r = trn_fail(TRN_ERR_FORMAT, "%s: hidden_act \"%s\": only \"silu\" (SwiGLU) is supported", path, act);
    else if ((r = rope_from_hf(root, path, c)) != TRN_OK)
        ;
    else if (attn_bias || mlp_bias)
        r = trn_fail(TRN_ERR_FORMAT, "%s: attention_bias / mlp_bias: this Llama has no biases", path);
    else if ((sizes = *c, sizes.tied = 0, !config_ok(&sizes))) // after RoPE (its rope_theta); tied: init_inspect
        r = trn_fail(TRN_ERR_FORMAT, "%s: inconsistent sizes (layers %d, heads %d/%d, hidden %d, head_dim %d, "
                     "intermediate %d, vocab %d, rope_theta %g, rms_norm_eps %g)", path, c->n_layer, c->n_head,
                     c->n_kv_head, c->n_embd, c->head_dim, c->ffn_hidden, c->vocab_size, (double)c->rope_theta,
                     (double)c->norm_eps);
    return r;
}
static trn_result config_from_hf(const char *path, llama_config *c) {
    trn_json doc;
    trn_result r = trn_json_load(&doc, path);
    if (r != TRN_OK) return r; // the reason names the file and the byte
    r = config_from_hf_doc(&doc, path, c);
    trn_json_free(&doc);
    return r;
}

// The weights of an --init: one safetensors file, or Hugging Face's shards
// (DIR/model.safetensors.index.json, whose "weight_map" names the file of
// every tensor: {"model.norm.weight": "model-00002-of-00002.safetensors"}).
// A shard is opened when a tensor in it is first asked for; each remembers
// which of its tensors were read (the strict import's leftover check).
typedef struct st_shards {
    trn_json index;          // the index (sharded only)
    trn_json_value map;      // its weight_map
    int sharded, n;          // n files open
    char dir[1100];          // where the shards are
    trn_safetensors *f;      // [n]
    unsigned char **used;    // [n][tensors of that file]
} st_shards;

static void shards_close(st_shards *s) {
    for (int i = 0; i < s->n; i++) trn_safetensors_close(&s->f[i]), free(s->used[i]);
    free(s->f), free(s->used);
    if (s->sharded) trn_json_free(&s->index);
    memset(s, 0, sizeof *s);
}
static trn_result shards_add(st_shards *s, const char *path) {
    trn_safetensors *f = (trn_safetensors *)realloc(s->f, sizeof *f * (size_t)(s->n + 1));
    unsigned char **u = f ? (unsigned char **)realloc(s->used, sizeof *u * (size_t)(s->n + 1)) : NULL;
    if (f) s->f = f;
    if (u) s->used = u;
    if (!f || !u) return trn_fail(TRN_ERR_NOMEM, "%s: out of memory", path);
    trn_result r = trn_safetensors_open(&s->f[s->n], path);
    if (r != TRN_OK) return r;
    if (!(s->used[s->n] = (unsigned char *)calloc((size_t)s->f[s->n].n_tensors + 1, 1))) {
        trn_safetensors_close(&s->f[s->n]);
        return trn_fail(TRN_ERR_NOMEM, "%s: out of memory", path);
    }
    s->n++;
    return TRN_OK;
}
// path: a .safetensors file, or an index .json
static trn_result shards_open(st_shards *s, const char *path) {
    memset(s, 0, sizeof *s);
    size_t n = strlen(path);
    if (n < 5 || strcmp(path + n - 5, ".json") != 0) return shards_add(s, path);
    trn_result r = trn_json_load(&s->index, path);
    if (r != TRN_OK) return r;
    s->sharded = 1;
    s->map = trn_json_key(trn_json_root(&s->index), "weight_map");
    if (s->map.twice || trn_json_typeof(s->map) != TRN_JSON_OBJECT) {
        shards_close(s);
        return trn_fail(TRN_ERR_FORMAT, "%s: no \"weight_map\" object", path);
    }
    const char *slash = strrchr(path, '/');
    snprintf(s->dir, sizeof s->dir, "%.*s", slash ? (int)(slash - path) : 1, slash ? path : ".");
    return TRN_OK;
}
// tensor `name`: its file and entry (marked used when mark); NULL *t: absent
static trn_result shards_find(st_shards *s, const char *name, int mark, trn_safetensors **f, const trn_st_tensor **t) {
    int k = 0;
    *f = NULL, *t = NULL;
    if (s->sharded) {
        char file[256], path[1400];
        trn_json_value v = trn_json_key(s->map, name);
        if (!v.at && !v.twice) return TRN_OK; // not in the index
        trn_result r = trn_json_string(v, file, sizeof file);
        if (r != TRN_OK) return r;
        if (strchr(file, '/') || !strcmp(file, "..") || !file[0])
            return trn_fail(TRN_ERR_FORMAT, "%s: weight_map names file \"%s\" (a file beside the index is expected)", s->index.name, file);
        snprintf(path, sizeof path, "%s/%s", s->dir, file);
        for (k = 0; k < s->n && strcmp(s->f[k].path, path) != 0; k++) {}
        if (k == s->n && (r = shards_add(s, path)) != TRN_OK) return r;
    }
    *f = &s->f[k];
    *t = trn_safetensors_find(*f, name);
    if (s->sharded && !*t)
        return trn_fail(TRN_ERR_MISMATCH, "%s: the index puts tensor %s in this file, which has no such tensor", (*f)->path, name);
    if (*t && mark) s->used[k][*t - (*f)->tensors] = 1;
    return TRN_OK;
}

// What --init found: the model's shape and where the weights are.
typedef struct init_source {
    llama_config cfg;
    char weights[1100];
    int hf;        // 1: Hugging Face names (q/k/v separate), 0: this program's file
    int tied;      // HF: no lm_head in the file, the head is embed_tokens (tie_word_embeddings)
} init_source;

// --init PATH: a directory with config.json + model.safetensors, or a
// .safetensors file (written here, or HF's with config.json beside it)
static trn_result init_inspect(const char *path, init_source *src) {
    struct stat st;
    char cfgpath[1100];
    memset(src, 0, sizeof *src);
    if (stat(path, &st) != 0) return trn_fail(TRN_ERR_IO, "%s: %s", path, strerror(errno));
    if (S_ISDIR(st.st_mode)) {
        snprintf(src->weights, sizeof src->weights, "%s/model.safetensors", path);
        snprintf(cfgpath, sizeof cfgpath, "%s/config.json", path);
        if (stat(src->weights, &st) != 0) {
            snprintf(src->weights, sizeof src->weights, "%s/model.safetensors.index.json", path);
            if (stat(src->weights, &st) != 0)
                return trn_fail(TRN_ERR_IO, "%s: no model.safetensors, nor model.safetensors.index.json (shards)", path);
        }
    } else {
        const char *slash = strrchr(path, '/');
        snprintf(src->weights, sizeof src->weights, "%s", path);
        snprintf(cfgpath, sizeof cfgpath, "%.*s/config.json", slash ? (int)(slash - path) : 1, slash ? path : ".");
    }
    st_shards sh;
    trn_safetensors *f;
    const trn_st_tensor *head;
    trn_result r = shards_open(&sh, src->weights);
    if (r != TRN_OK) return r;
    if (!sh.sharded && config_from_st(&sh.f[0], &src->cfg)) { // a file written by this program
        shards_close(&sh);
        return config_ok(&src->cfg) ? TRN_OK : trn_fail(TRN_ERR_FORMAT, "%s: bad llama.* metadata", src->weights);
    }
    src->hf = 1;
    r = shards_find(&sh, "lm_head.weight", 0, &f, &head);
    shards_close(&sh);
    if (r != TRN_OK) return r;
    int has_head = head != NULL;
    if (stat(cfgpath, &st) != 0) return trn_fail(TRN_ERR_IO, "%s: a Hugging Face model needs its config.json (%s)", path, cfgpath);
    r = config_from_hf(cfgpath, &src->cfg);
    if (r != TRN_OK) return r;
    // tie_word_embeddings true: one tensor, as transformers (an lm_head.weight
    // in the file is then a copy that transformers' tie_weights() replaces);
    // absent: tied when the file has no lm_head.weight; false: it must have one
    if (src->cfg.tied < 0) src->cfg.tied = !has_head;
    if (!src->cfg.tied && !has_head)
        return trn_fail(TRN_ERR_MISMATCH, "%s: tensor lm_head.weight is missing and config.json says "
                        "tie_word_embeddings false", src->weights);
    src->tied = src->cfg.tied;
    const trn_rope_scaling *sc = &src->cfg.rope;
    if (sc->type != TRN_ROPE_DEFAULT)
        printf("note: %s: RoPE scaling %s, factor %g%s\n", cfgpath, ROPE_NAMES[sc->type], (double)sc->factor,
               sc->type == TRN_ROPE_DYNAMIC ? " (context grows to factor x max_position_embeddings)" : "");
    return TRN_OK;
}

// read tensor `name` (rows x cols floats) into dst, checking its shape and
// (unless --init-lenient) that every value is finite; marks it used
static trn_result read_checked(st_shards *s, const char *name, int64_t rows, int64_t cols, float *dst) {
    trn_safetensors *f;
    const trn_st_tensor *t;
    trn_result r0 = shards_find(s, name, 1, &f, &t);
    if (r0 != TRN_OK) return r0;
    if (!t) return trn_fail(TRN_ERR_MISMATCH, "%s: tensor %s is missing", s->sharded ? s->index.name : s->f[0].path, name);
    int ok = cols == 1 ? (t->ndim == 1 && t->shape[0] == rows) : (t->ndim == 2 && t->shape[0] == rows && t->shape[1] == cols);
    if (!ok)
        return trn_fail(TRN_ERR_MISMATCH, "%s: tensor %s has %d dims (%lld,%lld), expected (%lld,%lld)", f->path, name,
                        t->ndim, (long long)t->shape[0], (long long)(t->ndim > 1 ? t->shape[1] : 1), (long long)rows,
                        (long long)cols);
    trn_result r = trn_safetensors_read(f, t, dst);
    return r == TRN_OK ? init_check_finite(f->path, name, dst, (size_t)(rows * cols)) : r;
}

// buffers some exports carry that hold no weights (transformers recomputes them)
static int llama_ignorable(const char *name) {
    size_t n = strlen(name), k = strlen("rotary_emb.inv_freq");
    return n >= k && !strcmp(name + n - k, "rotary_emb.inv_freq");
}

// Every parameter from the file. HF: q_proj, k_proj, v_proj stacked into
// qkv_proj (rows: NH*hs of q, NKV*hs of k, NKV*hs of v, the layout
// trn_rope and trn_attention_gqa read); lm_head = embed_tokens if tied;
// the padding rows of the vocabulary are zero.
static trn_result init_load(llama *g, const init_source *src) {
    const llama_config *c = &g->cfg;
    int hs = c->head_dim, V = c->vocab_size;
    st_shards f;
    trn_result r = shards_open(&f, src->weights);
    if (r != TRN_OK) return r;
    size_t most = 0;
    for (int i = 0; i < g->m.n_params; i++) most = g->m.params[i]->size > most ? g->m.params[i]->size : most;
    float *buf = (float *)trn_alloc(most * sizeof(float), TRN_KIND_TEMP);
    if (!buf) {
        shards_close(&f);
        return trn_fail(TRN_ERR_NOMEM, "--init: out of memory");
    }
    for (int i = 0; i < g->m.n_params && r == TRN_OK; i++) {
        trn_tensor *p = g->m.params[i];
        int64_t rows = p->shape[0], cols = p->ndim == 2 ? p->shape[1] : 1;
        memset(buf, 0, p->size * sizeof(float));
        if (!src->hf) {
            r = read_checked(&f, p->name, rows, cols, buf);
        } else if (p == g->embed || p == g->head) { // V rows in the file, Vp here
            r = read_checked(&f, p == g->head && !src->tied ? "lm_head.weight" : "model.embed_tokens.weight", V, cols, buf);
        } else if (strstr(p->name, "qkv_proj")) {
            char name[128], stem[96];
            snprintf(stem, sizeof stem, "%.*s", (int)(strstr(p->name, "qkv_proj") - p->name), p->name);
            int64_t nq = (int64_t)c->n_head * hs, nkv = (int64_t)c->n_kv_head * hs;
            snprintf(name, sizeof name, "%sq_proj.weight", stem);
            r = read_checked(&f, name, nq, cols, buf);
            snprintf(name, sizeof name, "%sk_proj.weight", stem);
            if (r == TRN_OK) r = read_checked(&f, name, nkv, cols, buf + nq * cols);
            snprintf(name, sizeof name, "%sv_proj.weight", stem);
            if (r == TRN_OK) r = read_checked(&f, name, nkv, cols, buf + (nq + nkv) * cols);
        } else {
            r = read_checked(&f, p->name, rows, cols, buf);
        }
        if (r == TRN_OK) trn_write(&g->m, p, buf);
    }
    if (r == TRN_OK && src->hf && src->tied) { // a tied file may carry its head's copy: transformers ties it away
        trn_safetensors *hf;
        const trn_st_tensor *h;
        r = shards_find(&f, "lm_head.weight", 1, &hf, &h);
    }
    for (int k = 0; k < f.n && r == TRN_OK; k++) r = init_check_unused(&f.f[k], f.used[k], llama_ignorable);
    trn_free(buf);
    shards_close(&f);
    return r;
}

// ===========================================================================
// >>main: the run (examples/common.h's run_main: flags, resume, data, the
// training loop and its extras, the sample) drives this model through the
// functions of an lm_example
// ===========================================================================

static void usage(FILE *f) {
    print_usage(f, "train a Llama with train.h", "mini | tiny | tinyllama-1.1b [mini]",
                "DIR with Hugging Face config.json + model.safetensors, or a model.safetensors written here", "", "");
}

#ifndef LLAMA_NO_MAIN
static llama L, *model = &L;  // the model of this run
static llama_config C;        // its shape: the checkpoint's, else --init's, else the preset's
static init_source S;         // what --init found
static void meta_of(trn_meta *meta) { config_to_meta(&C, meta); }
static trn_tensor *batch_loss(const int *x, const int *y, int B, int T) { return llama_loss(&L, x, y, B, T); }
static void done(void) { llama_free(&L); }

static int shape_of(const run_args *a, const trn_safetensors *ck, const char *ck_path, lm_dims *d, int *batch,
                    int *seq, float *lr) {
    const preset *p = find_preset(a->model ? a->model : "mini");
    if (p) *batch = p->batch, *seq = p->seq, *lr = p->lr; // the preset's run: batch, context, lr
    if (ck) {
        if (!config_from_st(ck, &C) || !config_ok(&C)) die("--resume %s: bad model config in its metadata", ck_path);
    } else if (a->init) {
        if (init_inspect(a->init, &S) != TRN_OK) die("--init %s", trn_error_reason());
        C = S.cfg;
    } else if (p) {
        C = p->cfg;
    }
    if (!p) return 0;
    d->n_layer = C.n_layer, d->n_embd = C.n_embd, d->block_size = C.block_size;
    d->kv_heads = C.n_kv_head, d->head_dim = C.head_dim; // grouped-query: the cache keeps the kv heads
    return 1;
}

static void weights(const char *path, uint64_t seed) {
    if (!path) { llama_init_weights(&L, seed); return; }
    if (init_load(&L, &S) != TRN_OK) die("--init %s", trn_error_reason());
    printf("loaded %s%s\n", S.weights, S.hf ? (S.tied ? " (Hugging Face names, tied head)" : " (Hugging Face names)") : "");
}

static trn_model *make(void) { return llama_create(model, &C, llama_backend()) != TRN_OK ? NULL : &model->m; }

static void say(void) {
    printf("model: L=%d heads=%d kv_heads=%d C=%d head_dim=%d ffn=%d context=%d vocab=%d (padded %d), rope_theta %g, "
           "%.2fM parameters, backend %s\n", C.n_layer, C.n_head, C.n_kv_head, C.n_embd, C.head_dim,
           C.ffn_hidden, C.block_size, C.vocab_size, C.padded_vocab, C.rope_theta, L.m.n_floats / 1e6,
           trn_backend_name(&L.m));
}

static const lm_example LLAMA = {
    "mini | tiny | tinyllama-1.1b",
    0,     // no --shard: examples/gpt2 shows ZeRO and FSDP
    0.95f, // AdamW's beta2: Llama's recipe (Touvron et al. 2023)
    &L, &C.vocab_size, &C.padded_vocab, &L.recompute,
    usage, shape_of, make, weights, say, meta_of, batch_loss, llama_logits, llama_logits_cached, done,
    1, // --tokenizer: tokenizer.json beside --init by default
};

int main(int argc, char **argv) { return run_main(argc, argv, &LLAMA); }
#endif /* LLAMA_NO_MAIN */
