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
// into something that looks like C (600 steps: validation loss 5.5 -> 1.7;
// 1.8 to 4.7 s a step on a busy 2-core AMD EPYC with AVX2). Other things
// to try:
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
// Sections: >>config (presets) >>model >>weights (--init, saving) >>main.
// examples/common.h has the run itself (run_main: flags, data-parallel
// ranks, resume, the training loop and its extras, the sample), shared
// with examples/llama.c.
#define TRAIN_IMPLEMENTATION
#include "train.h"
#include "extras/train_data.h" // tokenizers, token shards, the batch loader
#include "extras/train_loop.h" // progress/ETA, CSV, TensorBoard, spike guard, early stop
#include "extras/train_run.h"  // run directories: keep-K, resume, keep-best, async saves
#include "extras/train_generate.h" // sampling with a key/value cache
#include "extras/train_json.h" // config.json (--init DIR)

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

// errors, flags, data, the log, the plot, sampling, the loop's extras, and
// (with train_nccl.h) the whole run: run_main
#define EX_PROG "gpt2"
#include "common.h"

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
    // x = x + h (into h: nothing reads it), then h = ln_2(x): one call, so
    // that a GPU adds and normalizes in one pass (train.h's >>addln)
    h = trn_add_layernorm(m, x, h, b->ln2_w, b->ln2_b, &x);        // (B,T,C)
    // x = x + mlp(ln_2(x)), the MLP 4C wide with GELU: fcp(gelu(fc(h))),
    // one call so that a GPU runs GELU inside the GEMMs (train.h's >>mlp)
    h = trn_mlp(m, h, b->fc_w, b->fc_b, b->fcp_w, b->fcp_b);       // (B,T,C), 4C inside
    return trn_add_inplace(m, x, h);
}

// The forward pass up to the LM head: ids (B,T) -> ln_f output (B,T,C).
// Each op records itself on the tape (unless m->grad_enabled is 0), so
// trn_backward can replay it in reverse. Call trn_reset(&g->m) first.
// With --recompute a block keeps only its input for backward and runs
// again inside backward (activation checkpointing: less memory, ~1/3 more
// compute in the blocks; the gradients are bit-identical).
// The position ids of a (B,T) batch whose first position is pos0: the
// id of (b,t) is pos0 + t (host memory, grown as needed)
static const int *gpt2_positions(gpt2 *g, int B, int T, int pos0) {
    if (B * T > g->pos_cap) {
        free(g->pos);
        g->pos = (int *)malloc(sizeof(int) * (size_t)B * T);
        if (!g->pos) trn_fatal("gpt2: out of memory for %d position ids", B * T);
        g->pos_cap = B * T;
    }
    for (int i = 0; i < B * T; i++) g->pos[i] = pos0 + i % T;
    return g->pos;
}

static trn_tensor *gpt2_hidden(gpt2 *g, const int *ids, int B, int T) {
    trn_model *m = &g->m;
    // token embedding + position embedding (position of (b,t) is t)   (B,T,C)
    const int *pos = gpt2_positions(g, B, T, 0);
    trn_tensor *x = trn_add(m, trn_embedding(m, g->wte, ids, B, T), trn_embedding(m, g->wpe, pos, B, T));
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
    const int *pos = gpt2_positions(g, B, T, kv->len); // absolute positions
    trn_tensor *x = trn_add(m, trn_embedding(m, g->wte, ids, B, T), trn_embedding(m, g->wpe, pos, B, T));
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
    trn_tensor *last = trn_last_position(m, x); // x[:, T-1, :], (B,1,C)
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

// The config in a file's metadata, "gpt2.<field>" for each field of
// gpt2_config (an X-macro: GPT2_FIELDS(X) is X(n_layer) X(n_head) ...)
#define GPT2_FIELDS(X) X(n_layer) X(n_head) X(n_embd) X(block_size) X(vocab_size) X(padded_vocab)
static void config_to_meta(const gpt2_config *c, trn_meta *meta) {
#define GPT2_PUT(f) trn_meta_set_u64(meta, "gpt2." #f, (uint64_t)c->f);
    GPT2_FIELDS(GPT2_PUT)
#undef GPT2_PUT
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
// >>main: the run (examples/common.h's run_main: flags, data-parallel
// ranks, resume, data, the training loop and its extras, the sample)
// drives this model through the functions of an lm_example
// ===========================================================================

static void usage(FILE *f) {
    print_usage(f, "train GPT-2 with train.h", "mini | tiny | gpt2 | gpt2-medium | gpt2-large | gpt2-xl [mini]",
                "Hugging Face model.safetensors or llm.c .bin",
                "  --shard MODE       data parallel: none (DDP) | zero1 | zero2 | fsdp [none]\n",
                "data-parallel: start N copies with torchrun --no-python, mpirun, srun, or RANK/WORLD_SIZE\n"
                "  (MASTER_ADDR/MASTER_PORT); --batch is per rank; rank 0 prints and writes the files\n");
}

#ifndef GPT2_NO_MAIN
static gpt2 G;              // the model of this run
static gpt2_config CFG;     // its shape
static init_source SRC;     // what --init found

// the shape: a checkpoint's metadata, else the --init file's, else the preset
static int configure(const run_args *a, const trn_safetensors *ck, const char *ck_path, lm_dims *d, int *batch,
                     int *seq, float *lr) {
    const preset *pre = find_preset(a->model ? a->model : "mini");
    if (!pre) return 0;
    CFG = pre->cfg, *batch = pre->batch, *seq = pre->seq, *lr = pre->lr;
    if (ck) {
#define GPT2_GET(f) CFG.f = (int)st_meta_long(ck, "gpt2." #f);
        GPT2_FIELDS(GPT2_GET)
#undef GPT2_GET
        if (CFG.n_layer <= 0 || CFG.n_head <= 0 || CFG.n_embd <= 0 || CFG.block_size <= 0 || CFG.vocab_size <= 0 ||
            CFG.padded_vocab < CFG.vocab_size || CFG.n_embd % CFG.n_head)
            die("--resume %s: bad model config in its metadata", ck_path);
    } else if (a->init) {
        if (init_inspect(a->init, a->model ? &pre->cfg : NULL, &SRC) != TRN_OK) die("--init %s", trn_error_reason());
        CFG = SRC.cfg;
    }
    d->n_layer = CFG.n_layer, d->n_embd = CFG.n_embd, d->block_size = CFG.block_size;
    d->kv_heads = CFG.n_head, d->head_dim = CFG.n_embd / CFG.n_head;
    return 1;
}

static trn_model *create(void) { return gpt2_create(&G, &CFG, GPT2_BACKEND()) == TRN_OK ? &G.m : NULL; }

static void init(const char *path, uint64_t seed) {
    if (!path) { gpt2_init_weights(&G, seed); return; }
    trn_result r = SRC.kind == 1 ? init_load_llmc(&G, path, &SRC) : init_load_safetensors(&G, path, &SRC);
    if (r != TRN_OK) die("--init %s", trn_error_reason());
    printf("loaded %s\n", path);
}

static void describe(void) {
    printf("model: L=%d heads=%d C=%d context=%d vocab=%d (padded %d), %.2fM parameters, backend %s\n", CFG.n_layer,
           CFG.n_head, CFG.n_embd, CFG.block_size, CFG.vocab_size, CFG.padded_vocab, G.m.n_floats / 1e6,
           trn_backend_name(&G.m));
}

static void to_meta(trn_meta *meta) { config_to_meta(&CFG, meta); }
static trn_tensor *loss(const int *x, const int *y, int B, int T) { return gpt2_loss(&G, x, y, B, T); }
static void release(void) { gpt2_free(&G); }

static const lm_example GPT2 = {
    "mini | tiny | gpt2 | gpt2-medium | gpt2-large | gpt2-xl",
    1,     // data-parallel: --shard none | zero1 | zero2 | fsdp
    0.95f, // AdamW's beta2: the GPT-2/3 recipe (Brown et al. 2020), as nanoGPT and llm.c
    &G, &CFG.vocab_size, &CFG.padded_vocab, &G.recompute,
    usage, configure, create, init, describe, to_meta, loss, gpt2_logits, gpt2_logits_cached, release,
    0, // --tokenizer: only when given (--bpe DIR reads GPT-2's own files)
};

int main(int argc, char **argv) { return run_main(argc, argv, &GPT2); }
#endif /* GPT2_NO_MAIN */
