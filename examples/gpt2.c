// gpt2 - GPT-2 trained end to end with train.h: data, tokenizers, training
// loop, validation, sampling, checkpoints, pretrained weights, data-parallel.
// build: -pthread
//
// The model is written once, from the kit's ops (embedding, layernorm,
// linear, attention, gelu, add, cross-entropy); the tape gives the backward
// pass. The same code runs on CUDA: examples/gpt2_cuda.cu is just
//     #define TRN_USE_CUDA
//     #include "gpt2.c"
// and the only lines that differ are the ones that pick the backend the
// model is created on (gpt2_backend, below the includes).
//
// Run it (no download needed: with no --data it learns the kit's own text,
// byte by byte):
//
//     ./build.sh && ./examples/gpt2
//
// and watch the loss fall from ln(256) = 5.5 and the sample at the end turn
// into something that looks like C (600 steps: validation loss 5.4 -> 1.6,
// about 70 s on 2 cores). Other things to try:
//
//     ./examples/gpt2 --data my.txt --steps 2000         any text file
//     ./examples/gpt2 --model gpt2 --data fineweb_val_000000.bin   llm.c shard
//     ./examples/gpt2 --init gpt2/model.safetensors --bpe gpt2 --steps 0
//                     --prompt "The meaning of life is"    (one line) GPT-2
//     ./examples/gpt2 --resume runs/gpt2                   continue a run
//
// The run directory (--out, default runs/gpt2) receives the checkpoints
// (ckpt_<step>.safetensors: weights + AdamW + step + RNG + data position),
// the final weights (model.safetensors), and loss.svg (train and validation
// loss). --log FILE writes one JSON object per line for scripts.
//
// Data-parallel: start W copies with the launcher you use; each rank takes
// its own batches, gradients are averaged (train_nccl.h: TCP between CPU
// processes, NCCL between GPUs in gpt2_cuda), rank 0 prints and writes:
//
//     torchrun --nproc_per_node=8 --no-python ./examples/gpt2_cuda ...
//     for r in 0 1; do RANK=$r WORLD_SIZE=2 ./examples/gpt2 --out runs/d & done
//
// --batch is per rank (W ranks x B = one rank with W*B, the same windows);
// a run resumes only with the world size that wrote its checkpoint.
//
// Sections: >>config (presets) >>model >>weights (--init, saving) >>train
// (evaluation) >>main; examples/common.h has data, sampling, logs, plot,
// flags and the loop's extras, shared with examples/llama.c.
#define TRAIN_IMPLEMENTATION
#include "train.h"
#include "extras/train_data.h" // tokenizers, token shards, the batch loader
#include "extras/train_loop.h" // progress/ETA, CSV, TensorBoard, spike guard, early stop

#include <errno.h>
#include <glob.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

// The one place where the backend is chosen. Everything below only talks
// to the model through train.h, which routes each op to m->backend.
#ifdef TRN_USE_CUDA
#ifndef TRAIN_CUDA_IMPLEMENTATION
#define TRAIN_CUDA_IMPLEMENTATION
#endif
#include "train_cuda.h"
// main has initialized this rank's GPU (trn_cuda_init(local rank), device
// 0 without a launcher) before it creates the model
static const trn_backend *gpt2_backend(void) { return trn_cuda_backend(); }
#else
static const trn_backend *gpt2_backend(void) { return NULL; } // NULL = the CPU backend
#endif
#define GPT2_BACKEND() gpt2_backend()

// errors, flags, data, the log, the plot, sampling, the loop's extras
#define EX_PROG "gpt2"
#include "common.h"

// Data parallelism, for main only (bench/ and tests/ include this file for
// the model, with GPT2_NO_MAIN). Without launcher variables: one rank, no
// sockets, every collective a no-op.
#ifndef GPT2_NO_MAIN
#ifndef TRN_USE_CUDA
#define TRAIN_NCCL_CPU_ONLY // CPU processes: the ring over TCP
#endif
#define TRAIN_NCCL_IMPLEMENTATION
#include "train_nccl.h"
#endif

// ===========================================================================
// >>config: the shapes of GPT-2, and a small one that trains in minutes
// ===========================================================================

typedef struct gpt2_config {
    int n_layer;      // L: transformer blocks
    int n_head;       // NH: attention heads (head size C / NH)
    int n_embd;       // C: channels of the residual stream
    int block_size;   // maxT: the longest context (rows of wpe)
    int vocab_size;   // V: tokens the model predicts
    int padded_vocab; // Vp: rows of wte; V rounded up to 128 for the matmuls
} gpt2_config;

typedef struct preset {
    const char *name;
    gpt2_config cfg;
    int batch, seq;   // default micro-batch and sequence length on a CPU
    float lr;         // default peak learning rate
    const char *what;
} preset;

// V = 256 means byte-level: the tokens are the bytes of the text.
static const preset PRESETS[] = {
    {"mini", {4, 4, 192, 256, 256, 256}, 16, 128, 2e-3f, "byte-level, 1.9M parameters: learns in minutes on a CPU"},
    {"tiny", {2, 2, 32, 64, 256, 256}, 4, 32, 3e-3f, "byte-level, 34K parameters: for tests"},
    {"gpt2", {12, 12, 768, 1024, 50257, 50304}, 4, 64, 6e-4f, "GPT-2 small, 124M"},
    {"gpt2-medium", {24, 16, 1024, 1024, 50257, 50304}, 4, 64, 3e-4f, "GPT-2 medium, 350M"},
    {"gpt2-large", {36, 20, 1280, 1024, 50257, 50304}, 4, 64, 2.5e-4f, "GPT-2 large, 774M"},
    {"gpt2-xl", {48, 25, 1600, 1024, 50257, 50304}, 4, 64, 2e-4f, "GPT-2 XL, 1558M"},
};
#define N_PRESETS ((int)(sizeof PRESETS / sizeof PRESETS[0]))

static const preset *find_preset(const char *name) {
    for (int i = 0; i < N_PRESETS; i++)
        if (strcmp(PRESETS[i].name, name) == 0) return &PRESETS[i];
    return NULL;
}

// ===========================================================================
// >>model
// Parameter names are Hugging Face's GPT-2 names ("h.0.attn.c_attn.weight")
// so that files are easy to compare; the weight matrices are stored as
// nn.Linear stores them, (out, in). Hugging Face's GPT-2 uses Conv1D, which
// stores (in, out): --init transposes those when it loads them.
// ===========================================================================

typedef struct gpt2_block {
    trn_tensor *ln1_w, *ln1_b;   // (C) (C)         ln_1
    trn_tensor *qkv_w, *qkv_b;   // (3C,C) (3C)     attn.c_attn: x -> q,k,v
    trn_tensor *proj_w, *proj_b; // (C,C) (C)       attn.c_proj
    trn_tensor *ln2_w, *ln2_b;   // (C) (C)         ln_2
    trn_tensor *fc_w, *fc_b;     // (4C,C) (4C)     mlp.c_fc
    trn_tensor *fcp_w, *fcp_b;   // (C,4C) (C)      mlp.c_proj
    int n_head;                  // a recompute region sees only its block
} gpt2_block;

typedef struct gpt2 {
    gpt2_config cfg;
    trn_model m;               // flat weights/grads, arena, tape, backend
    trn_tensor *wte, *wpe;     // (Vp,C) token embeddings = LM head; (maxT,C)
    gpt2_block *h;             // L blocks
    trn_tensor *lnf_w, *lnf_b; // (C) (C)
    int *pos;                  // host: position ids t for every (b,t)
    int pos_cap;
    int recompute;             // 1: each block is a recompute region (--recompute)
} gpt2;

static trn_result gpt2_create(gpt2 *g, const gpt2_config *cfg, const trn_backend *backend) {
    memset(g, 0, sizeof *g);
    g->cfg = *cfg;
    int L = cfg->n_layer, C = cfg->n_embd;
    trn_result r = trn_model_init(&g->m, backend);
    if (r != TRN_OK) return r;
    trn_model *m = &g->m;
    g->wte = trn_param2(m, "wte.weight", cfg->padded_vocab, C);
    g->wpe = trn_param2(m, "wpe.weight", cfg->block_size, C);
    g->h = (gpt2_block *)calloc((size_t)L, sizeof(gpt2_block));
    if (!g->h) return trn_fail(TRN_ERR_NOMEM, "gpt2: out of memory for %d blocks", L);
    for (int l = 0; l < L; l++) {
        gpt2_block *b = &g->h[l];
        char n[64];
        b->n_head = cfg->n_head;
#define GPT2_P1(field, what, d0) (snprintf(n, sizeof n, "h.%d.%s", l, what), b->field = trn_param1(m, n, d0))
#define GPT2_P2(field, what, d0, d1) (snprintf(n, sizeof n, "h.%d.%s", l, what), b->field = trn_param2(m, n, d0, d1))
        GPT2_P1(ln1_w, "ln_1.weight", C);
        GPT2_P1(ln1_b, "ln_1.bias", C);
        GPT2_P2(qkv_w, "attn.c_attn.weight", 3 * C, C);
        GPT2_P1(qkv_b, "attn.c_attn.bias", 3 * C);
        GPT2_P2(proj_w, "attn.c_proj.weight", C, C);
        GPT2_P1(proj_b, "attn.c_proj.bias", C);
        GPT2_P1(ln2_w, "ln_2.weight", C);
        GPT2_P1(ln2_b, "ln_2.bias", C);
        GPT2_P2(fc_w, "mlp.c_fc.weight", 4 * C, C);
        GPT2_P1(fc_b, "mlp.c_fc.bias", 4 * C);
        GPT2_P2(fcp_w, "mlp.c_proj.weight", C, 4 * C);
        GPT2_P1(fcp_b, "mlp.c_proj.bias", C);
#undef GPT2_P1
#undef GPT2_P2
    }
    g->lnf_w = trn_param1(m, "ln_f.weight", C);
    g->lnf_b = trn_param1(m, "ln_f.bias", C);
    return trn_model_alloc(m); // one flat buffer, zeroed
}

static void gpt2_free(gpt2 *g) {
    trn_model_free(&g->m);
    free(g->h);
    free(g->pos);
    memset(g, 0, sizeof *g);
}

// GPT-2's initialization (Radford et al. 2019, section 2.3, as in their
// code): every weight matrix ~ N(0, 0.02); the two projections that write
// into the residual stream (attn.c_proj, mlp.c_proj) get 0.02/sqrt(2L), so
// the residual's variance does not grow with depth; biases 0 (the buffer
// is zeroed); LayerNorm gains 1. The padding rows of wte stay 0: no token
// has them, and the loss ignores their logits, so they never change.
static void gpt2_init_weights(gpt2 *g, uint64_t seed) {
    trn_rng rng;
    trn_model *m = &g->m;
    int V = g->cfg.vocab_size, Vp = g->cfg.padded_vocab, C = g->cfg.n_embd;
    float std = 0.02f, std_res = 0.02f / sqrtf(2.0f * (float)g->cfg.n_layer);
    trn_rng_seed(&rng, seed);
    trn_init_normal(m, g->wte, 0.0f, std, &rng);
    if (Vp > V) { // zero the padding rows: a host row of zeros, uploaded per row
        float *zeros = (float *)calloc((size_t)C, sizeof(float));
        if (!zeros) trn_fatal("gpt2_init_weights: out of memory");
        for (int v = V; v < Vp; v++) trn_write_range(m, g->wte, (size_t)v * C, zeros, (size_t)C);
        free(zeros);
    }
    trn_init_normal(m, g->wpe, 0.0f, std, &rng);
    for (int l = 0; l < g->cfg.n_layer; l++) {
        gpt2_block *b = &g->h[l];
        trn_init_const(m, b->ln1_w, 1.0f);
        trn_init_normal(m, b->qkv_w, 0.0f, std, &rng);
        trn_init_normal(m, b->proj_w, 0.0f, std_res, &rng);
        trn_init_const(m, b->ln2_w, 1.0f);
        trn_init_normal(m, b->fc_w, 0.0f, std, &rng);
        trn_init_normal(m, b->fcp_w, 0.0f, std_res, &rng);
    }
    trn_init_const(m, g->lnf_w, 1.0f);
}

// One transformer block, x (B,T,C) -> (B,T,C). Its signature is a
// trn_region_fn so that --recompute can hand it to trn_recompute.
static trn_tensor *gpt2_block_forward(trn_model *m, trn_tensor *x, void *user) {
    gpt2_block *b = (gpt2_block *)user;
    // x = x + attn(ln_1(x)): pre-LayerNorm, the residual stays clean
    trn_tensor *h = trn_layernorm(m, x, b->ln1_w, b->ln1_b);      // (B,T,C)
    h = trn_linear(m, h, b->qkv_w, b->qkv_b);                      // (B,T,3C)
    h = trn_attention(m, h, b->n_head, 1);                         // (B,T,C) causal
    h = trn_linear(m, h, b->proj_w, b->proj_b);                    // (B,T,C)
    x = trn_add_inplace(m, x, h);                                  // (into h: nothing reads it)
    // x = x + mlp(ln_2(x)), the MLP 4C wide with GELU: fcp(gelu(fc(h))),
    // one call so that a GPU runs GELU inside the GEMMs (train.h's >>mlp)
    h = trn_layernorm(m, x, b->ln2_w, b->ln2_b);                   // (B,T,C)
    h = trn_mlp(m, h, b->fc_w, b->fc_b, b->fcp_w, b->fcp_b);       // (B,T,C), 4C inside
    return trn_add_inplace(m, x, h);
}

// The forward pass up to the LM head: ids (B,T) -> ln_f output (B,T,C).
// Each op records itself on the tape (unless m->grad_enabled is 0), so
// trn_backward can replay it in reverse. Call trn_reset(&g->m) first.
// With --recompute a block keeps only its input for backward and runs
// again inside backward (activation checkpointing: less memory, ~1/3 more
// compute in the blocks; the gradients are bit-identical).
static trn_tensor *gpt2_hidden(gpt2 *g, const int *ids, int B, int T) {
    trn_model *m = &g->m;
    if (B * T > g->pos_cap) {
        free(g->pos);
        g->pos = (int *)malloc(sizeof(int) * (size_t)B * T);
        if (!g->pos) trn_fatal("gpt2_forward: out of memory");
        g->pos_cap = B * T;
    }
    for (int i = 0; i < B * T; i++) g->pos[i] = i % T; // position of (b,t) is t
    // token embedding + position embedding                      (B,T,C)
    trn_tensor *x = trn_add(m, trn_embedding(m, g->wte, ids, B, T), trn_embedding(m, g->wpe, g->pos, B, T));
    for (int l = 0; l < g->cfg.n_layer; l++) {
        trn_unit(m, g->h[l].ln1_w); // block l starts (FSDP gathers its weights here)
        x = g->recompute ? trn_recompute(m, gpt2_block_forward, &g->h[l], x) : gpt2_block_forward(m, x, &g->h[l]);
    }
    trn_unit(m, NULL); // out of the blocks
    return trn_layernorm(m, x, g->lnf_w, g->lnf_b);
}

// The forward pass for generation, with a key/value cache (train.h's
// >>kvcache): T new tokens ids (B,T) at positions kv->len .. kv->len+T-1.
// Each block's attention appends their keys and values to its layer of the
// cache and attends over everything cached, so a new token costs one
// position, not the window. Returns the logits of the last position only,
// (B,1,Vp): all a sampler needs (the LM head is C x Vp per position).
// Inference only: call with the tape off.
static trn_tensor *gpt2_forward_cached(gpt2 *g, trn_kv_cache *kv, const int *ids, int B, int T) {
    trn_model *m = &g->m;
    int C = g->cfg.n_embd, last_shape[3] = {B, 1, C};
    if (B * T > g->pos_cap) {
        free(g->pos);
        g->pos = (int *)malloc(sizeof(int) * (size_t)B * T);
        if (!g->pos) trn_fatal("gpt2_forward_cached: out of memory");
        g->pos_cap = B * T;
    }
    for (int i = 0; i < B * T; i++) g->pos[i] = kv->len + i % T; // absolute positions
    trn_tensor *x = trn_add(m, trn_embedding(m, g->wte, ids, B, T), trn_embedding(m, g->wpe, g->pos, B, T));
    for (int l = 0; l < g->cfg.n_layer; l++) { // the block of gpt2_forward, attention over the cache
        gpt2_block *b = &g->h[l];
        trn_tensor *h = trn_layernorm(m, x, b->ln1_w, b->ln1_b);
        h = trn_linear(m, h, b->qkv_w, b->qkv_b);
        h = trn_attention_cached_qkv(m, kv, l, h, g->cfg.n_head);     // (B,T,C)
        x = trn_add(m, x, trn_linear(m, h, b->proj_w, b->proj_b));
        h = trn_layernorm(m, x, b->ln2_w, b->ln2_b);
        x = trn_add(m, x, trn_mlp(m, h, b->fc_w, b->fc_b, b->fcp_w, b->fcp_b));
    }
    trn_kv_cache_advance(kv, T);
    trn_tensor *last = trn_tensor_new(m, "last", 3, last_shape); // x[:, T-1, :]
    size_t es = trn_dtype_size(x->dtype);                        // bytes per value: 4, or 2 in bf16
    for (int b = 0; b < B; b++)
        m->backend->copy((char *)last->data + (size_t)b * C * es, (char *)x->data + ((size_t)b * T + T - 1) * C * es,
                         es * (size_t)C);
    last = trn_layernorm(m, last, g->lnf_w, g->lnf_b);
    return trn_linear(m, last, g->wte, NULL);                         // (B,1,Vp)
}

// The logits (B,T,Vp), for sampling and --dump-logits. The LM head is tied
// to the token embedding: logits = x @ wte^T.
static trn_tensor *gpt2_forward(gpt2 *g, const int *ids, int B, int T) {
    return trn_linear(&g->m, gpt2_hidden(g, ids, B, T), g->wte, NULL);
}

// the forwards as examples/common.h's sampler calls them
static trn_tensor *gpt2_logits(void *g, const int *ids, int B, int T) { return gpt2_forward((gpt2 *)g, ids, B, T); }
static trn_tensor *gpt2_logits_cached(void *g, trn_kv_cache *kv, const int *ids, int B, int T) {
    return gpt2_forward_cached((gpt2 *)g, kv, ids, B, T);
}

// mean cross-entropy of the next token over the V real classes (scalar).
// The LM head and the loss are one op that walks the rows in chunks, so
// the (B,T,Vp) logits and their gradient never exist whole.
static trn_tensor *gpt2_loss(gpt2 *g, const int *x, const int *y, int B, int T) {
    return trn_linear_cross_entropy(&g->m, gpt2_hidden(g, x, B, T), g->wte, NULL, y, g->cfg.vocab_size);
}

// parameters that go through matmuls (for FLOP counts): all but biases and
// LayerNorms, with wte counted once as the LM head (its embedding use is
// a lookup) and wpe not at all
static double gpt2_matmul_params(const gpt2_config *c) {
    double C = c->n_embd;
    return (double)c->n_layer * 12.0 * C * C + (double)c->padded_vocab * C;
}

// FLOPs of one training step (forward + backward = 3x forward) for B*T
// tokens: 2 per multiply-add in every linear layer, plus attention's two
// (T,T) products per layer, counted as the full square (the usual convention;
// the fused causal kernel skips the blocks above the diagonal)
static double gpt2_step_flops(const gpt2_config *c, int B, int T) {
    double tokens = (double)B * T;
    double linear = 6.0 * gpt2_matmul_params(c) * tokens;
    double attn = 3.0 * c->n_layer * (2.0 * 2.0 * (double)B * T * T * c->n_embd);
    return linear + attn;
}

// ===========================================================================
// >>weights: --init from Hugging Face or llm.c files; the metadata we save
// ===========================================================================

static void config_to_meta(const gpt2_config *c, trn_meta *meta) {
    trn_meta_set_u64(meta, "gpt2.n_layer", (uint64_t)c->n_layer);
    trn_meta_set_u64(meta, "gpt2.n_head", (uint64_t)c->n_head);
    trn_meta_set_u64(meta, "gpt2.n_embd", (uint64_t)c->n_embd);
    trn_meta_set_u64(meta, "gpt2.block_size", (uint64_t)c->block_size);
    trn_meta_set_u64(meta, "gpt2.vocab_size", (uint64_t)c->vocab_size);
    trn_meta_set_u64(meta, "gpt2.padded_vocab", (uint64_t)c->padded_vocab);
    // linear weights are (out,in) like nn.Linear; Hugging Face's are (in,out)
    trn_meta_set(meta, "gpt2.layout", "linear");
}

// "n_head": 12 from a Hugging Face config.json next to the weights; -1
// when there is no config.json; -2 (the reason set) when there is one that
// is not strict JSON or whose n_head is not an integer in [1, 65536]: a
// broken config is an error, never "no config" and a guessed head count
static int n_head_from_config_json(const char *weights_path) {
    char path[1024];
    const char *slash = strrchr(weights_path, '/');
    int dir_len = slash ? (int)(slash - weights_path) : 1;
    snprintf(path, sizeof path, "%.*s/config.json", dir_len, slash ? weights_path : ".");
    struct stat st;
    if (stat(path, &st) != 0 && errno == ENOENT) return -1;
    trn_json doc;
    if (trn_json_load(&doc, path) != TRN_OK) return -2;
    int64_t nh = -1;
    trn_json_value root = trn_json_root(&doc);
    trn_result r = trn_json_typeof(root) != TRN_JSON_OBJECT ? trn_fail(TRN_ERR_FORMAT, "%s: not a JSON object", path)
                   : trn_json_has(root, "n_head") ? trn_json_int(trn_json_key(root, "n_head"), 1, 65536, &nh)
                                                  : TRN_OK;
    trn_json_free(&doc);
    return r != TRN_OK ? -2 : (int)nh;
}

// What --init found in a file: the model's shape and how to read it.
typedef struct init_source {
    int kind;             // 1 = llm.c .bin, 2 = safetensors
    gpt2_config cfg;
    int file_vocab_rows;  // rows of wte in the file (V or Vp)
    char prefix[32];      // "" or "transformer."
    int conv1d;           // Hugging Face layout: matrices are (in,out)
    int llmc_version;
} init_source;

// Look at an --init file without loading it: its model config.
static trn_result init_inspect(const char *path, const gpt2_config *hint, init_source *src) {
    memset(src, 0, sizeof *src);
    if (trn_check_regular(path) != TRN_OK) return TRN_ERR_IO; // a FIFO would block fopen
    FILE *fp = fopen(path, "rb");
    if (!fp) return trn_fail(TRN_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    int hdr[256];
    size_t got = fread(hdr, sizeof(int), 256, fp);
    fclose(fp);
    if (got >= 8 && hdr[0] == 20240326) {
        // llm.c's model file: 256 int32 (magic, version, maxT, V, L, NH, C,
        // Vp), then every parameter as float32, in llm.c's order
        if (got < 256) return trn_fail(TRN_ERR_FORMAT, "%s: llm.c header is truncated", path);
        if (hdr[1] != 3 && hdr[1] != 1)
            return trn_fail(TRN_ERR_FORMAT, "%s: llm.c model version %d (float32 versions 1 and 3 are read)", path, hdr[1]);
        src->kind = 1;
        src->llmc_version = hdr[1];
        src->cfg.block_size = hdr[2];
        src->cfg.vocab_size = hdr[3];
        src->cfg.n_layer = hdr[4];
        src->cfg.n_head = hdr[5];
        src->cfg.n_embd = hdr[6];
        src->file_vocab_rows = hdr[1] == 3 ? hdr[7] : hdr[3];
        src->cfg.padded_vocab = hdr[1] == 3 ? hdr[7] : pad_vocab(hdr[3]);
        const gpt2_config *c = &src->cfg;
        if (c->block_size <= 0 || c->vocab_size <= 0 || c->n_layer <= 0 || c->n_head <= 0 || c->n_embd <= 0 ||
            c->n_embd % c->n_head || c->padded_vocab < c->vocab_size || c->n_layer > 1000 || c->n_embd > 100000 ||
            c->block_size > 1000000 || c->padded_vocab > 10000000)
            return trn_fail(TRN_ERR_FORMAT, "%s: implausible llm.c header (maxT %d V %d L %d NH %d C %d Vp %d)", path,
                            c->block_size, c->vocab_size, c->n_layer, c->n_head, c->n_embd, c->padded_vocab);
        return TRN_OK;
    }
    trn_safetensors f;
    trn_result r = trn_safetensors_open(&f, path);
    if (r != TRN_OK) return r;
    src->kind = 2;
    const trn_st_tensor *wte = trn_safetensors_find(&f, "wte.weight");
    if (!wte && (wte = trn_safetensors_find(&f, "transformer.wte.weight")) != NULL) strcpy(src->prefix, "transformer.");
    char name[96];
    snprintf(name, sizeof name, "%swpe.weight", src->prefix);
    const trn_st_tensor *wpe = trn_safetensors_find(&f, name);
    if (!wte || !wpe || wte->ndim != 2 || wpe->ndim != 2 || wte->shape[1] != wpe->shape[1]) {
        trn_safetensors_close(&f);
        return trn_fail(TRN_ERR_MISMATCH, "%s: not a GPT-2 model (no wte.weight/wpe.weight of shape (V,C) and (maxT,C))", path);
    }
    if (wte->shape[0] < 1 || wte->shape[1] < 1 || wpe->shape[0] < 1 || wte->shape[1] > 100000 ||
        wpe->shape[0] > 1000000 || wte->shape[0] > 10000000) {
        trn_safetensors_close(&f);
        return trn_fail(TRN_ERR_MISMATCH, "%s: wte.weight (%lld,%lld) / wpe.weight (%lld,%lld): a size is 0 or implausible",
                        path, (long long)wte->shape[0], (long long)wte->shape[1], (long long)wpe->shape[0],
                        (long long)wpe->shape[1]);
    }
    gpt2_config *c = &src->cfg;
    c->n_embd = (int)wte->shape[1];
    c->block_size = (int)wpe->shape[0];
    src->file_vocab_rows = (int)wte->shape[0];
    for (c->n_layer = 0;; c->n_layer++) {
        snprintf(name, sizeof name, "%sh.%d.ln_1.weight", src->prefix, c->n_layer);
        if (!trn_safetensors_find(&f, name)) break;
    }
    // files written here say everything in __metadata__; Hugging Face's say
    // nothing, and the head count is not visible in the weights: it comes
    // from config.json beside the file, --model, or C/64 (true for all GPT-2s)
    long v = st_meta_long(&f, "gpt2.vocab_size"), nh = st_meta_long(&f, "gpt2.n_head");
    const char *layout = trn_safetensors_meta(&f, "gpt2.layout");
    src->conv1d = !(layout && strcmp(layout, "linear") == 0);
    c->vocab_size = v > 0 ? (int)v : src->file_vocab_rows;
    c->padded_vocab = pad_vocab(c->vocab_size);
    if (src->file_vocab_rows > c->padded_vocab) c->padded_vocab = src->file_vocab_rows;
    c->n_head = nh > 0 ? (int)nh : n_head_from_config_json(path);
    if (c->n_head == -2) {
        trn_safetensors_close(&f);
        return TRN_ERR_FORMAT; // the reason (set) names config.json and what is wrong
    }
    if (c->n_head <= 0) {
        int from_model = hint && hint->n_embd == c->n_embd;
        c->n_head = from_model ? hint->n_head : (c->n_embd % 64 == 0 ? c->n_embd / 64 : 1);
        printf("note: %s does not say its head count (no config.json beside it): using %d%s\n", path, c->n_head,
               from_model ? " from --model" : ", head size 64 as in every GPT-2");
    }
    trn_safetensors_close(&f);
    if (c->n_layer == 0) return trn_fail(TRN_ERR_MISMATCH, "%s: no h.0.ln_1.weight: not a GPT-2 model", path);
    if (c->n_embd % c->n_head) return trn_fail(TRN_ERR_MISMATCH, "%s: %d channels do not split into %d heads", path, c->n_embd, c->n_head);
    if (c->vocab_size > src->file_vocab_rows)
        return trn_fail(TRN_ERR_MISMATCH, "%s: vocab_size %d but wte has %d rows", path, c->vocab_size, src->file_vocab_rows);
    return TRN_OK;
}

// out (cols,rows) = in (rows,cols) transposed
static void transpose(float *out, const float *in, int64_t rows, int64_t cols) {
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++) out[j * rows + i] = in[i * cols + j];
}

// buffers Hugging Face's GPT-2 files carry besides the weights: the causal
// mask (h.N.attn.bias, h.N.attn.masked_bias) and lm_head.weight, a copy of wte
static int gpt2_ignorable(const char *name) {
    size_t n = strlen(name);
    return (n >= 10 && !strcmp(name + n - 10, ".attn.bias")) || (n >= 17 && !strcmp(name + n - 17, ".attn.masked_bias")) ||
           !strcmp(name, "lm_head.weight");
}

// Fill every parameter of g from a safetensors file (Hugging Face's GPT-2,
// or one written here). HF's Conv1D matrices are (in,out): transposed here.
// Strict (examples/common.h): finite values, no tensor left unread.
static trn_result init_load_safetensors(gpt2 *g, const char *path, const init_source *src) {
    trn_safetensors f;
    trn_result r = trn_safetensors_open(&f, path);
    if (r != TRN_OK) return r;
    size_t most = 0;
    for (int i = 0; i < g->m.n_params; i++) most = g->m.params[i]->size > most ? g->m.params[i]->size : most;
    float *buf = (float *)trn_alloc(2 * most * sizeof(float), TRN_KIND_TEMP);
    unsigned char *used = (unsigned char *)calloc((size_t)f.n_tensors + 1, 1);
    if (!buf || !used) {
        trn_free(buf), free(used), trn_safetensors_close(&f);
        return trn_fail(TRN_ERR_NOMEM, "--init: out of memory");
    }
    float *tmp = buf + most;
    for (int i = 0; i < g->m.n_params && r == TRN_OK; i++) {
        trn_tensor *p = g->m.params[i];
        char name[128];
        snprintf(name, sizeof name, "%s%s", src->prefix, p->name);
        const trn_st_tensor *t = trn_safetensors_find(&f, name);
        if (!t) { r = trn_fail(TRN_ERR_MISMATCH, "%s: tensor %s is missing", path, name); break; }
        used[t - f.tensors] = 1;
        int is_conv = src->conv1d && p->ndim == 2 && p != g->wte && p != g->wpe;
        int64_t rows = p->shape[0], cols = p->ndim == 2 ? p->shape[1] : 1;
        if (p == g->wte) rows = src->file_vocab_rows; // may be fewer than Vp
        int ok = (p->ndim == 1 && t->ndim == 1 && t->shape[0] == rows) ||
                 (p->ndim == 2 && t->ndim == 2 && !is_conv && t->shape[0] == rows && t->shape[1] == cols) ||
                 (p->ndim == 2 && t->ndim == 2 && is_conv && t->shape[0] == cols && t->shape[1] == rows);
        if (!ok) {
            r = trn_fail(TRN_ERR_MISMATCH, "%s: tensor %s has %d dims (%lld,%lld), expected (%lld,%lld)%s", path, name,
                         t->ndim, (long long)t->shape[0], (long long)(t->ndim > 1 ? t->shape[1] : 0),
                         (long long)(is_conv ? cols : rows), (long long)(is_conv ? rows : cols),
                         is_conv ? " (Conv1D layout)" : "");
            break;
        }
        if ((r = trn_safetensors_read(&f, t, is_conv ? tmp : buf)) != TRN_OK) break;
        if ((r = init_check_finite(path, name, is_conv ? tmp : buf, (size_t)(rows * cols))) != TRN_OK) break;
        if (is_conv) transpose(buf, tmp, cols, rows); // file (in,out) -> kit (out,in)
        if (p == g->wte && rows < p->shape[0])          // zero padding rows
            memset(buf + rows * cols, 0, sizeof(float) * (size_t)(p->shape[0] - rows) * (size_t)cols);
        trn_write(&g->m, p, buf);
    }
    if (r == TRN_OK) r = init_check_unused(&f, used, gpt2_ignorable);
    free(used);
    trn_free(buf);
    trn_safetensors_close(&f);
    return r;
}

// Fill every parameter of g from an llm.c model file: after the header,
// float32 arrays in this order, each stacked over the L layers:
//   wte (Vp,C) wpe (maxT,C) ln1w (L,C) ln1b (L,C) qkvw (L,3C,C) qkvb (L,3C)
//   attprojw (L,C,C) attprojb (L,C) ln2w ln2b (L,C) fcw (L,4C,C) fcb (L,4C)
//   fcprojw (L,C,4C) fcprojb (L,C) lnfw (C) lnfb (C)
// llm.c's matrices are (out,in), as here. Version 1 files have V rows of wte.
static trn_result init_load_llmc(gpt2 *g, const char *path, const init_source *src) {
    const gpt2_config *c = &g->cfg;
    int L = c->n_layer, C = c->n_embd;
    if (trn_check_regular(path) != TRN_OK) return TRN_ERR_IO;
    FILE *fp = fopen(path, "rb");
    if (!fp) return trn_fail(TRN_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    double want = 1024.0 + 4.0 * ((double)src->file_vocab_rows * C + (double)c->block_size * C +
                                  (double)L * (12.0 * C * C + 13.0 * C) + 2.0 * C);
    fseek(fp, 0, SEEK_END);
    double have = (double)ftell(fp);
    if (have != want) {
        fclose(fp);
        return trn_fail(TRN_ERR_FORMAT, "%s: %.0f bytes, but its header describes a %.0f-byte model (truncated?)", path, have, want);
    }
    fseek(fp, 1024, SEEK_SET);
    size_t most = (size_t)c->padded_vocab * C;
    float *buf = (float *)trn_calloc(most * sizeof(float), TRN_KIND_TEMP);
    if (!buf) { fclose(fp); return trn_fail(TRN_ERR_NOMEM, "--init: %s", trn_error_reason()); }
    trn_result r = TRN_OK;
#define LLMC_READ(tensor, n)                                                                    \
    do {                                                                                        \
        if (r == TRN_OK) {                                                                      \
            if (fread(buf, sizeof(float), (size_t)(n), fp) != (size_t)(n))                      \
                r = trn_fail(TRN_ERR_FORMAT, "%s: short read at %s", path, (tensor)->name);     \
            else if ((r = init_check_finite(path, (tensor)->name, buf, (size_t)(n))) == TRN_OK) \
                trn_write(&g->m, (tensor), buf);                                                \
        }                                                                                       \
    } while (0)
    LLMC_READ(g->wte, (size_t)src->file_vocab_rows * C); // rows past V stay 0 (calloc)
    LLMC_READ(g->wpe, (size_t)c->block_size * C);
    for (int l = 0; l < L; l++) LLMC_READ(g->h[l].ln1_w, C);
    for (int l = 0; l < L; l++) LLMC_READ(g->h[l].ln1_b, C);
    for (int l = 0; l < L; l++) LLMC_READ(g->h[l].qkv_w, 3 * C * C);
    for (int l = 0; l < L; l++) LLMC_READ(g->h[l].qkv_b, 3 * C);
    for (int l = 0; l < L; l++) LLMC_READ(g->h[l].proj_w, C * C);
    for (int l = 0; l < L; l++) LLMC_READ(g->h[l].proj_b, C);
    for (int l = 0; l < L; l++) LLMC_READ(g->h[l].ln2_w, C);
    for (int l = 0; l < L; l++) LLMC_READ(g->h[l].ln2_b, C);
    for (int l = 0; l < L; l++) LLMC_READ(g->h[l].fc_w, 4 * C * C);
    for (int l = 0; l < L; l++) LLMC_READ(g->h[l].fc_b, 4 * C);
    for (int l = 0; l < L; l++) LLMC_READ(g->h[l].fcp_w, 4 * C * C);
    for (int l = 0; l < L; l++) LLMC_READ(g->h[l].fcp_b, C);
    LLMC_READ(g->lnf_w, C);
    LLMC_READ(g->lnf_b, C);
#undef LLMC_READ
    trn_free(buf);
    fclose(fp);
    return r;
}

// ===========================================================================
// >>train: evaluation (examples/common.h: sampling, the log, the plot)
// ===========================================================================

// mean validation loss over n validation batches (fixed, so every
// evaluation sees the same tokens); with --overfit, the loss of the one
// memorized batch already in x, y. Like torch.no_grad(): no tape.
// Rank r of W takes batches r, r+W, ..., (n of them): main averages the W
// means, which is the mean over the first n*W batches, as one rank with a
// W times larger batch would compute it.
static double evaluate(gpt2 *g, trn_loader *ld, int overfit, int n, int *x, int *y, int B, int T, int rank, int world) {
    double sum = 0.0;
    int grad_was = trn_no_grad(&g->m); // no tape, and evaluation mode (no dropout)
    trn_eval(&g->m);
    if (overfit) n = 1;
    for (int i = 0; i < n; i++) {
        if (!overfit) trn_loader_val_batch(ld, (int64_t)i * world + rank, x, y);
        trn_reset(&g->m);
        sum += trn_item(&g->m, gpt2_loss(g, x, y, B, T));
    }
    trn_train(&g->m);
    trn_set_grad_enabled(&g->m, grad_was);
    return sum / n;
}

// ===========================================================================
// >>main
// ===========================================================================

static void usage(FILE *f) {
    print_usage(f, "train GPT-2 with train.h", "mini | tiny | gpt2 | gpt2-medium | gpt2-large | gpt2-xl [mini]",
                "Hugging Face model.safetensors or llm.c .bin",
                "  --shard MODE       data parallel: none (DDP) | zero1 | zero2 | fsdp [none]\n",
                "data-parallel: start N copies with torchrun --no-python, mpirun, srun, or RANK/WORLD_SIZE\n"
                "  (MASTER_ADDR/MASTER_PORT); --batch is per rank; rank 0 prints and writes the files\n");
}

#ifndef GPT2_NO_MAIN
// ---- data parallelism (train_nccl.h): one rank of W -------------------------
static trn_ddp ddp;

// a collective failed (a rank died or hung): say why, close the
// communicator so the other ranks stop now too, exit 1
#define DDP_OK(call)                                                                         \
    do {                                                                                     \
        if ((call) != TRN_OK) {                                                              \
            fprintf(stderr, "gpt2: rank %d: %s\n", ddp.rank, trn_error_reason());            \
            trn_ddp_abort(&ddp);                                                             \
            exit(1);                                                                         \
        }                                                                                    \
    } while (0)

// This rank's next batch. The loader walks one global order on every rank;
// each draw takes W batches and keeps the rank-th, so this rank's k-th
// batch is global batch k*W + rank (trn_ddp_batch_index): the ranks never
// overlap, together they see what one rank with a W times larger --batch
// sees, and every loader stays at the same position (the one a checkpoint
// saves).
static void next_batch(trn_loader *ld, int *x, int *y, int *skip_x, int *skip_y) {
    for (int r = 0; r < ddp.world; r++) trn_loader_next(ld, r == ddp.rank ? x : skip_x, r == ddp.rank ? y : skip_y);
}

// >>sharded: checkpoints of a --shard run. Every rank holds only part of
// the state, so every rank writes its slice: DIR/ckpt_<step>.shards/ holds
// one file per rank and, written last, manifest.json (train_nccl.h's
// trn_ddp_checkpoint_save_sharded). tools/consolidate merges one into a
// model.safetensors.
// the newest DIR/ckpt_*.shards whose save finished (has its manifest) and
// passes trn_checkpoint_verify_sharded (every rank file there, checksummed,
// of the manifest's save), or "". A broken one is skipped, saying which
// and why, as trn_checkpoint_latest does for whole-state checkpoints; none
// valid exits 2 with the newest one's reason. Every rank decides alone,
// from the same files, the same way.
static void latest_shards(const char *dir, char *out, size_t cap) {
    glob_t gl;
    char pat[1100], first[600] = "";
    out[0] = 0;
    snprintf(pat, sizeof pat, "%s/ckpt_*.shards/manifest.json", dir);
    if (glob(pat, 0, NULL, &gl) == 0 && gl.gl_pathc > 0) {
        for (size_t i = gl.gl_pathc; i-- > 0 && !out[0];) { // zero-padded steps: the last is the newest
            snprintf(out, cap, "%s", gl.gl_pathv[i]);
            *strrchr(out, '/') = 0;
            if (trn_checkpoint_verify_sharded(out) == TRN_OK) break;
            if (trn_ddp_is_main(&ddp)) fprintf(stderr, "gpt2: skipping a broken sharded checkpoint: %s\n", trn_error_reason());
            if (!first[0]) snprintf(first, sizeof first, "%s", trn_error_reason());
            out[0] = 0;
        }
        if (!out[0]) die("--resume %s: no valid sharded checkpoint (%zu broken; newest: %s)", dir, gl.gl_pathc, first);
    }
    globfree(&gl);
}

// rank 0's file of a sharded checkpoint: its metadata has the run's flags
static int shards_rank0(const char *sdir, char *out, size_t cap) {
    glob_t gl;
    char pat[1100];
    int found = 0;
    snprintf(pat, sizeof pat, "%s/rank-00000-of-*.safetensors", sdir);
    if (glob(pat, 0, NULL, &gl) == 0 && gl.gl_pathc == 1) { snprintf(out, cap, "%s", gl.gl_pathv[0]); found = 1; }
    globfree(&gl);
    return found;
}

// rank 0, after a save: only the newest `keep` sharded checkpoints stay
static void prune_shards(const char *dir, int keep) {
    glob_t gl, files;
    char pat[1100];
    snprintf(pat, sizeof pat, "%s/ckpt_*.shards", dir);
    if (glob(pat, 0, NULL, &gl) != 0) return;
    for (size_t i = 0; keep > 0 && i + (size_t)keep < gl.gl_pathc; i++) {
        snprintf(pat, sizeof pat, "%s/*", gl.gl_pathv[i]);
        if (glob(pat, 0, NULL, &files) == 0)
            for (size_t k = 0; k < files.gl_pathc; k++) remove(files.gl_pathv[k]);
        globfree(&files);
        rmdir(gl.gl_pathv[i]);
    }
    globfree(&gl);
}

// the validation loss: each rank its share of the batches, the mean over ranks
static float validate(gpt2 *g, trn_loader *ld, int overfit, int n, int *x, int *y, int B, int T) {
    double v = evaluate(g, ld, overfit, n, x, y, B, T, ddp.rank, ddp.world);
    DDP_OK(trn_ddp_allreduce_host(&ddp, &v, 1, 1));
    return (float)v;
}

// --resume PATH of a --shard run: PATH is a sharded checkpoint itself (it
// has manifest.json) or a run directory with some; its folder goes to out
// ("" if none: a whole-state checkpoint, common.h's resume_open)
static void resume_shards(const char *resume, char *out, size_t cap) {
    struct stat st;
    out[0] = 0;
    if (stat(resume, &st) != 0 || !S_ISDIR(st.st_mode)) return;
    snprintf(out, cap, "%s/manifest.json", resume);
    if (stat(out, &st) == 0) snprintf(out, cap, "%s", resume);
    else latest_shards(resume, out, cap);
}

int main(int argc, char **argv) {
    trn_omp_wait_passive(argv); // OpenMP threads sleep when idle (unless OMP_WAIT_POLICY is set)
    malloc_return_large_blocks(); // the OS's RSS follows the ledger (common.h)
    double t_begin = now_s();   // --max-time counts from here
    // --- defaults: -1 (or NULL) means "decided below": from the
    // checkpoint when resuming, else from the preset or the other flags
    run_args a;
    args_init(&a, "runs/gpt2");
    if (parse_args(&a, argc, argv)) { usage(stdout); return 0; }
    if (a.threads > 0) trn_set_threads(a.threads);

    // --- data parallelism: which rank of how many (the launcher's variables;
    // none: rank 0 of 1, no sockets). Before the model: under CUDA it picks
    // this rank's GPU. Rank 0 prints and writes every file; the other ranks'
    // stdout goes to /dev/null (their errors still reach stderr).
    trn_ddp_desc ddp_desc;
    memset(&ddp_desc, 0, sizeof ddp_desc);
    if (a.shard && trn_shard_parse(a.shard, &ddp_desc.shard) != TRN_OK) die("--shard: %s", trn_error_reason());
    if (trn_ddp_init(&ddp, &ddp_desc) != TRN_OK) die("%s", trn_error_reason());
#ifdef TRN_USE_CUDA
    // this rank's GPU (already done by trn_ddp_init unless it talks TCP)
    if (trn_cuda_init(ddp.local_rank) != TRN_OK) die("%s", trn_error_reason());
#endif
    apply_precision(a.precision);
    const int W = ddp.world, main_rank = trn_ddp_is_main(&ddp);
    if (!main_rank && !freopen("/dev/null", "w", stdout)) die("rank %d: /dev/null: %s", ddp.rank, strerror(errno));
    if (W > 1) printf("ddp: %d ranks started by %s, communicator %s\n", W, ddp.env.launcher, ddp.comm.name);

    // --- resume: find the checkpoint, read its model config and run flags
    char ckpt_path[1024] = "", shards_dir[1024] = "";
    trn_safetensors ck;
    int have_ck = 0;
    if (a.resume) {
        resume_shards(a.resume, shards_dir, sizeof shards_dir);
        if (!shards_dir[0]) resume_open(a.resume, ckpt_path, sizeof ckpt_path, &ck);
        else if (!shards_rank0(shards_dir, ckpt_path, sizeof ckpt_path)) die("--resume %s: no rank-00000 file", shards_dir);
        else if (trn_safetensors_open(&ck, ckpt_path) != TRN_OK) die("--resume %s: %s", ckpt_path, trn_error_reason());
        if (st_meta_long(&ck, "gpt2.n_layer") < 0 || st_meta_long(&ck, "run.step") < 0)
            die("--resume %s: not a checkpoint of examples/gpt2 (no gpt2.* / run.* metadata)", ckpt_path);
        have_ck = 1;
        if (a.init) { printf("note: --resume wins over --init\n"); a.init = NULL; }
        if (a.model) printf("note: --resume wins over --model %s (the checkpoint's model is resumed)\n", a.model);
        args_from_checkpoint(&a, &ck);
    }

    // --- the model's shape: checkpoint > --init file > preset
    const preset *pre = find_preset(a.model ? a.model : "mini");
    if (!pre) {
        char known[256] = "";
        for (int i = 0; i < N_PRESETS; i++) strcat(strcat(known, i ? ", " : ""), PRESETS[i].name);
        die("unknown --model '%s' (known: %s)", a.model, known);
    }
    gpt2_config cfg = pre->cfg;
    init_source src;
    if (have_ck) {
        cfg.n_layer = (int)st_meta_long(&ck, "gpt2.n_layer");
        cfg.n_head = (int)st_meta_long(&ck, "gpt2.n_head");
        cfg.n_embd = (int)st_meta_long(&ck, "gpt2.n_embd");
        cfg.block_size = (int)st_meta_long(&ck, "gpt2.block_size");
        cfg.vocab_size = (int)st_meta_long(&ck, "gpt2.vocab_size");
        cfg.padded_vocab = (int)st_meta_long(&ck, "gpt2.padded_vocab");
        if (cfg.n_layer <= 0 || cfg.n_head <= 0 || cfg.n_embd <= 0 || cfg.block_size <= 0 || cfg.vocab_size <= 0 ||
            cfg.padded_vocab < cfg.vocab_size || cfg.n_embd % cfg.n_head)
            die("--resume %s: bad model config in its metadata", ckpt_path);
    } else if (a.init) {
        if (init_inspect(a.init, a.model ? &pre->cfg : NULL, &src) != TRN_OK) die("--init %s", trn_error_reason());
        cfg = src.cfg;
    }

    // --- tokenizer: bytes, or GPT-2 BPE; its vocabulary must fit the model
    trn_tokenizer tok;
    load_tokenizer(&tok, a.bpe, !have_ck && !a.init, &cfg.vocab_size, &cfg.padded_vocab);

    // --- the rest of the defaults
    args_defaults(&a, pre->batch, pre->seq, pre->lr, cfg.block_size, cfg.vocab_size);
    int B = a.batch, T = a.seq;

    // --- data: tokens -> checked against the vocabulary -> loader
    trn_tokens tokens;
    if (a.data && !a.bpe && cfg.vocab_size > 256) {
        // a text file cannot be read without the BPE tokenizer; a shard can
        FILE *fp = trn_check_regular(a.data) == TRN_OK ? fopen(a.data, "rb") : NULL; // (a FIFO: load_tokens says so)
        int magic = 0;
        if (fp && fread(&magic, 4, 1, fp) == 1 && magic != 20240520) {
            fclose(fp);
            die("--data %s: a text file for a %d-token model needs --bpe DIR", a.data, cfg.vocab_size);
        }
        if (fp) fclose(fp);
    }
    load_tokens(&tokens, a.data, &tok, argv[0]);
    if (trn_tokens_check(tokens.ids, tokens.n, cfg.vocab_size) != TRN_OK)
        die("%s: %s (the model's vocabulary is %d; a GPT-2 shard needs --model gpt2 or --init)",
            a.data ? a.data : "data", trn_error_reason(), cfg.vocab_size);
    trn_loader ld;
    trn_loader_desc dd;
    memset(&dd, 0, sizeof dd);
    dd.B = B;
    dd.T = T;
    dd.seed = (uint64_t)a.seed;
    dd.no_val = a.overfit; // one memorized batch: no validation split
    if (trn_loader_init(&ld, tokens.ids, tokens.n, &dd) != TRN_OK)
        die("%s: %zu tokens: %s", a.data ? a.data : "data", tokens.n, trn_error_reason());
    args_eval_batches(&a, ld.val_batches, W);
    int *x = (int *)malloc(sizeof(int) * (size_t)B * T), *y = (int *)malloc(sizeof(int) * (size_t)B * T);
    int *skip_x = (int *)malloc(sizeof(int) * (size_t)B * T), *skip_y = (int *)malloc(sizeof(int) * (size_t)B * T);
    float *mb_loss = (float *)malloc(sizeof(float) * (size_t)a.grad_accum); // each micro-batch's loss
    if (!x || !y || !skip_x || !skip_y || !mb_loss) die("out of memory for a batch");
    if (a.overfit) next_batch(&ld, x, y, skip_x, skip_y); // the one batch to memorize (the loader stops here)

    // --- the model
    gpt2 g;
    trn_result r = gpt2_create(&g, &cfg, GPT2_BACKEND());
    if (r != TRN_OK) {
        fprintf(stderr, "gpt2: cannot create the model: %s\n", trn_error_reason());
        return 1;
    }
    g.recompute = a.recompute;
    trn_adamw opt;
    trn_adamw_desc od;
    memset(&od, 0, sizeof od);
    od.lr = a.lr;
    od.beta1 = 0.9f;
    od.beta2 = 0.95f; // GPT-2/3 recipe (Brown et al. 2020), as nanoGPT and llm.c
    od.eps = 1e-8f;
    od.weight_decay = a.weight_decay;
    od.no_weight_decay = a.weight_decay == 0.0f;
    trn_adamw_init(&opt, &od);
    trn_rng sample_rng;
    trn_rng_seed(&sample_rng, (uint64_t)a.seed ^ 0x5A4D504C45ull);
    long long step = 0;
    history hist;
    memset(&hist, 0, sizeof hist);
    run_loop loop; // --skip-spikes' window and --patience's best go into the checkpoint
    loop_init(&loop, &a, t_begin);

    int attached = 0;
    if (have_ck) {
        trn_safetensors_close(&ck);
        trn_meta meta;
        if (shards_dir[0]) { // every rank reads the slices it keeps
            DDP_OK(trn_ddp_attach(&ddp, &g.m));
            attached = 1;
            if (trn_ddp_checkpoint_load_sharded(&ddp, shards_dir, &g.m, &opt, &meta) != TRN_OK)
                die("--resume %s: %s", shards_dir, trn_error_reason());
            snprintf(ckpt_path, sizeof ckpt_path, "%s", shards_dir);
        } else if (trn_checkpoint_load(ckpt_path, &g.m, &opt, &meta) != TRN_OK)
            die("--resume %s: %s", ckpt_path, trn_error_reason());
        // the load restored the AdamW settings saved in the file; this run's
        // (the checkpoint's, unless a flag given again replaced them above)
        // are what the next steps use and what the next checkpoint records
        opt.desc = trn_adamw_defaults(&od);
        if (trn_ddp_meta_check(&ddp, &meta, ckpt_path) != TRN_OK) die("--resume: %s", trn_error_reason());
        step = run_state_from_meta(&meta, ckpt_path, &sample_rng, &ld);
        loop_resume(&loop, &meta);
        printf("resumed from %s at step %lld\n", ckpt_path, step);
        if (a.log && main_rank) log_truncate_and_read(a.log, step, &hist);
    } else if (a.init) {
        r = src.kind == 1 ? init_load_llmc(&g, a.init, &src) : init_load_safetensors(&g, a.init, &src);
        if (r != TRN_OK) die("--init %s", trn_error_reason());
        printf("loaded %s\n", a.init);
    } else {
        gpt2_init_weights(&g, (uint64_t)a.seed);
    }
    if (step > a.steps) die("--steps %lld: the checkpoint is already at step %lld", a.steps, step);
    // --shard (several ranks): no rank holds the whole state; every rank writes its slice
    const int sharded_ckpt = W > 1 && ddp_desc.shard != TRN_SHARD_NONE;
    if (have_ck && !shards_dir[0] && sharded_ckpt)
        die("--resume %s: a whole-state checkpoint; a --shard %s run resumes from a sharded one (ckpt_*.shards)", ckpt_path,
            a.shard);
    if (!attached) DDP_OK(trn_ddp_attach(&ddp, &g.m)); // every rank starts from rank 0's weights

    // --- say what is about to happen
    printf("model: L=%d heads=%d C=%d context=%d vocab=%d (padded %d), %.2fM parameters, backend %s\n", cfg.n_layer,
           cfg.n_head, cfg.n_embd, cfg.block_size, cfg.vocab_size, cfg.padded_vocab, g.m.n_floats / 1e6,
           g.m.backend->name);
    printf("data: %zu tokens (%zu train, %zu validation), %s tokenizer; batch %d x %d tokens x %d accumulation\n",
           tokens.n, ld.n_train, ld.n_val, a.bpe ? "GPT-2 BPE" : "byte", B, T, a.grad_accum);
    printf("train: %lld steps, lr %g -> %g (warmup %d, cosine), AdamW wd %g, clip %g, seed %lld, %d threads\n",
           a.steps, a.lr, a.min_lr, a.warmup, a.weight_decay, a.clip, a.seed, trn_get_threads());
    if (W > 1) printf("ddp: batch %d x %d ranks = %d sequences per micro-batch\n", B, W, B * W);
    const int files = main_rank && !a.fast_dev_run; // --fast-dev-run writes nothing
    if (files && trn_mkdirs(a.out) != TRN_OK) die("--out %s: %s", a.out, trn_error_reason());
    FILE *logf = NULL;
    if (main_rank && a.log && !(logf = log_open(a.log, have_ck))) die("--log %s", a.log);
    loop_open(&loop, &a, &g.m, step, have_ck, main_rank); // progress and ETA, CSV, TensorBoard, profile
    const char *stop = NULL; // why the loop ended early (--patience, --max-time)

    char path[1200], title[256];
    snprintf(title, sizeof title, "examples/gpt2: L=%d C=%d, %s, batch %dx%d", cfg.n_layer, cfg.n_embd,
             a.data ? a.data : "the kit's text", B, T);
    float val = -1;
    long long val_step = -1;

#define VALIDATE()                                                                                 \
    (val = validate(&g, &ld, a.overfit, a.eval_batches, x, y, B, T), val_step = step, loop_val(&loop, logf, &hist, step, val))
    if (step == 0 && a.eval_every > 0 && a.steps > 0) {
        VALIDATE();
        trn_early_stop_update(&loop.early, step, val);
    }

    // --- the training loop
    while (step < a.steps) {
        double t0 = now_s();
        float lr = trn_lr_schedule(step, a.warmup, a.steps, a.lr, a.min_lr);
        float loss = 0.0f;
        trn_zero_grad(&g.m);
        for (int k = 0; k < a.grad_accum; k++) {
            if (!a.overfit) next_batch(&ld, x, y, skip_x, skip_y);
            trn_reset(&g.m);
            trn_tensor *l = gpt2_loss(&g, x, y, B, T);
            trn_item_async(&g.m, l, &mb_loss[k]); // lands at trn_sync: the GPU does not stop here
            trn_ddp_set_sync(&ddp, k == a.grad_accum - 1); // all-reduce during the last backward only
            trn_backward(&g.m, l); // grads += d(this micro-batch's mean loss)
        }
        DDP_OK(trn_ddp_allreduce_grads(&ddp, &g.m)); // the mean gradient over the ranks
        // the mean over micro-batches: scale the summed gradients once
        // (ZeRO-2, FSDP: only this rank's slice of the gradients exists)
        size_t glo = g.m.grad_lo, ghi = g.m.grad_hi ? g.m.grad_hi : g.m.n_floats;
        if (a.grad_accum > 1) g.m.backend->scale(g.m.grad_data + glo, 1.0f / (float)a.grad_accum, ghi - glo);
        float norm;
        if (W == 1) trn_clip_grad_norm_async(&g.m, a.clip, &norm); // on the GPU, applied inside AdamW
        else DDP_OK(trn_ddp_clip_grad_norm(&ddp, &g.m, a.clip, &norm));
        // --skip-spikes decides from this step's loss and norm, so it waits
        // for them before the update; otherwise the update is queued first
        // and the step's one wait for the GPU comes after it
        if (a.skip_spikes > 0) trn_sync(&g.m);
        else DDP_OK(trn_ddp_adamw_step(&ddp, &opt, &g.m, lr)); // the same step on every rank
        trn_sync(&g.m); // the losses and the norm have landed
        for (int k = 0; k < a.grad_accum; k++) loss += mb_loss[k] / (float)a.grad_accum;
        double mean_loss = loss; // the loss logged: the mean over the ranks
        DDP_OK(trn_ddp_allreduce_host(&ddp, &mean_loss, 1, 1));
        loss = (float)mean_loss;
        // --skip-spikes: the same loss and norm on every rank, so the same decision
        int skipped = a.skip_spikes > 0 && trn_spike_guard_check(&loop.guard, loss, norm);
        if (a.skip_spikes > 0 && !skipped) {
            DDP_OK(trn_ddp_adamw_step(&ddp, &opt, &g.m, lr));
            trn_sync(&g.m);
        }
        step++;
        step_stats st = {step, loss, lr, norm, 1e3 * (now_s() - t0), 0, 0, skipped};
        st.tps = (double)B * T * a.grad_accum * W / (st.ms / 1e3);
        st.mem = trn_ledger_total(TRN_HOST) + trn_ledger_total(TRN_DEVICE);
        loop_step(&loop, &a, logf, &hist, &st); // the step's line (+ ETA), JSONL, TensorBoard, plot
        int force_ckpt = 0; // a stop (--patience, --max-time) leaves a checkpoint to resume from
        if (a.eval_every > 0 && (step % a.eval_every == 0 || step == a.steps)) {
            VALIDATE();
            if ((stop = loop_validated(&loop, &a, &hist, title, step, val, files))) force_ckpt = 1; // --patience
        }
        if (step < a.steps) { // every rank stops at the same step: any rank's clock or Ctrl-C decides
            double over[2] = {loop_over_time(&loop, &a), loop_interrupted()};
            if (W > 1) DDP_OK(trn_ddp_allreduce_host(&ddp, over, 2, 0));
            if (over[1] > 0) stop = LOOP_CTRL_C, force_ckpt = 1;
            else if (over[0] > 0) stop = "--max-time", force_ckpt = 1;
        }
        loop_step_end(&loop, &st, val_step == step ? val : NAN); // the CSV row
        if ((files || (sharded_ckpt && !a.fast_dev_run)) && (force_ckpt || (a.ckpt_every > 0 && (step % a.ckpt_every == 0 || step == a.steps)))) {
            // everything the next step depends on: weights, AdamW (in the
            // file's tensors), step, RNG, data position, flags (metadata)
            trn_meta meta;
            memset(&meta, 0, sizeof meta);
            config_to_meta(&cfg, &meta);
            run_to_meta(&a, &meta);
            // the world size (trn_ddp_meta_set's key; no "ddp.zero1": this
            // program does plain DDP, and the table holds 32 keys): resume
            // with another is refused. Absent = 1 rank, so W = 1 adds nothing.
            if (sharded_ckpt) trn_ddp_meta_set(&ddp, &meta); // world size and ZeRO: must match on resume
            else if (W > 1) trn_meta_set_u64(&meta, "ddp.world_size", (uint64_t)W);
            run_state_to_meta(&meta, step, &sample_rng, &ld);
            loop_to_meta(&loop, &a, &meta, val_step == step, val);
            if (sharded_ckpt) { // every rank its slice, rank 0 the manifest last
                trn_progress_break(&loop.prog);
                snprintf(path, sizeof path, "%s/ckpt_%08lld.shards", a.out, step);
                DDP_OK(trn_ddp_checkpoint_save_sharded(&ddp, path, &g.m, &opt, &meta));
                if (main_rank) prune_shards(a.out, a.keep);
                printf("checkpoint %s\n", path);
            } else {
                loop_save(&loop, &a, step, &g.m, &opt, &meta, val_step == step);
            }
        }
        if (stop) {
            loop_stopped(&loop, &a, step, stop);
            break;
        }
    }
    loop_finish(&loop, &a); // the last async checkpoint on disk, the profile

    // --- the end: a final validation, the plot, the weights, a sample
    if (val_step != step || a.eval_every == 0) VALIDATE();
#undef VALIDATE
    loop_close(&loop, step, val); // the CSV, TensorBoard; what the run did
    if (W > 1) DDP_OK(trn_ddp_print_memory(&ddp, "memory per rank (the ledger)"));
    DDP_OK(trn_ddp_unshard(&ddp, &g.m)); // FSDP: whole weights again, to save and sample on rank 0
    if (a.fast_dev_run) printf("fast-dev-run: 1 training step and 1 validation batch ran, no files written\n");
    snprintf(path, sizeof path, "%s/loss.svg", a.out);
    if (files) write_plot(path, &hist, title);
    if (files) {
        trn_meta meta;
        memset(&meta, 0, sizeof meta);
        config_to_meta(&cfg, &meta);
        snprintf(path, sizeof path, "%s/model.safetensors", a.out);
        CHECK_OK(trn_safetensors_save(path, &g.m, &meta));
        printf("wrote %s and %s/loss.svg\n", path, a.out);
    }
    trn_ledger_print("memory: what the kit allocated (peak = the step's high-water mark)");
    if (a.dump_logits && main_rank) { // the logits of validation batch 0 (--overfit: its one batch)
        if (!a.overfit) trn_loader_val_batch(&ld, 0, x, y);
        int grad_was = trn_no_grad(&g.m);
        trn_reset(&g.m);
        dump_logits(a.dump_logits, &g.m, gpt2_forward(&g, x, B, T));
        trn_set_grad_enabled(&g.m, grad_was);
    }
    if (a.sample > 0 && main_rank) {
        trn_kv_cache kv; // keys and values of the context: one position per new token
        CHECK_OK(trn_kv_cache_init(&kv, &g.m, cfg.n_layer, 1, T, cfg.n_head, cfg.n_embd / cfg.n_head));
        sample_run(&a, &g.m, gpt2_logits, &g, cfg.vocab_size, cfg.padded_vocab, &tok, T, &sample_rng,
                   gpt2_logits_cached, &kv);
        trn_kv_cache_free(&kv);
    }
    log_close(logf);
    DDP_OK(trn_ddp_barrier(&ddp)); // no rank leaves while another may still need it
    trn_ddp_free(&ddp);
    free(x);
    free(y);
    free(skip_x);
    free(mb_loss);
    free(skip_y);
    free(hist.step); free(hist.loss); free(hist.vstep); free(hist.vloss);
    trn_loader_free(&ld);
    trn_tokens_free(&tokens);
    trn_tokenizer_free(&tok);
    trn_adamw_free(&opt);
    gpt2_free(&g);
    return 0;
}
#endif /* GPT2_NO_MAIN */
