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
// Sections: >>config (presets) >>model >>weights (--init, saving) >>data
// >>train (evaluation, sampling, logs, plot, checkpoints) >>main.
#define TRAIN_IMPLEMENTATION
#include "train.h"

#include <ctype.h>
#include <errno.h>
#include <glob.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
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

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// Bad input (flags, files): one line on stderr, exit code 2.
static void die(const char *fmt, ...) {
    va_list ap;
    fflush(stdout);
    fputs("gpt2: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(2);
}

// A kit call that failed for reasons outside our control (disk full, out
// of memory): its reason, and exit code 1.
#define CHECK_OK(call)                                                                            \
    do {                                                                                          \
        trn_result check_r_ = (call);                                                             \
        if (check_r_ != TRN_OK) {                                                                 \
            fprintf(stderr, "gpt2: %s:%d: %s failed: %s (%s)\n", __FILE__, __LINE__, #call,       \
                    trn_error_reason(), trn_result_string(check_r_));                             \
            exit(1);                                                                              \
        }                                                                                         \
    } while (0)

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

// GPT-2 pads 50257 to 50304 = 393 * 128; a byte vocabulary stays 256
static int pad_vocab(int V) { return V <= 256 ? V : (V + 127) / 128 * 128; }

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
        for (int v = V; v < Vp; v++) m->backend->upload(g->wte->data + (size_t)v * C, zeros, sizeof(float) * (size_t)C);
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
    x = trn_add(m, x, h);
    // x = x + mlp(ln_2(x)), the MLP 4C wide with GELU
    h = trn_layernorm(m, x, b->ln2_w, b->ln2_b);                   // (B,T,C)
    h = trn_gelu(m, trn_linear(m, h, b->fc_w, b->fc_b));           // (B,T,4C)
    h = trn_linear(m, h, b->fcp_w, b->fcp_b);                      // (B,T,C)
    return trn_add(m, x, h);
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
        h = trn_gelu(m, trn_linear(m, h, b->fc_w, b->fc_b));
        x = trn_add(m, x, trn_linear(m, h, b->fcp_w, b->fcp_b));
    }
    trn_kv_cache_advance(kv, T);
    trn_tensor *last = trn_tensor_new(m, "last", 3, last_shape); // x[:, T-1, :]
    for (int b = 0; b < B; b++)
        m->backend->copy(last->data + (size_t)b * C, x->data + ((size_t)b * T + T - 1) * C, sizeof(float) * (size_t)C);
    last = trn_layernorm(m, last, g->lnf_w, g->lnf_b);
    return trn_linear(m, last, g->wte, NULL);                         // (B,1,Vp)
}

// The logits (B,T,Vp), for sampling and --dump-logits. The LM head is tied
// to the token embedding: logits = x @ wte^T.
static trn_tensor *gpt2_forward(gpt2 *g, const int *ids, int B, int T) {
    return trn_linear(&g->m, gpt2_hidden(g, ids, B, T), g->wte, NULL);
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

// a number from a safetensors header's __metadata__, or -1
static long st_meta_long(const trn_safetensors *f, const char *key) {
    const char *v = trn_safetensors_meta(f, key);
    char *end;
    long x;
    if (!v) return -1;
    errno = 0;
    x = strtol(v, &end, 10);
    return (errno || *end || end == v || x < 0 || x > 100000000) ? -1 : x;
}

// "n_head": 12 from a Hugging Face config.json next to the weights, or -1
static int n_head_from_config_json(const char *weights_path) {
    char path[1024];
    const char *slash = strrchr(weights_path, '/');
    int dir_len = slash ? (int)(slash - weights_path) : 1;
    snprintf(path, sizeof path, "%.*s/config.json", dir_len, slash ? weights_path : ".");
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    char buf[8192];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *p = strstr(buf, "\"n_head\"");
    if (!p || !(p = strchr(p, ':'))) return -1;
    return atoi(p + 1) > 0 ? atoi(p + 1) : -1;
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

// Fill every parameter of g from a safetensors file (Hugging Face's GPT-2,
// or one written here). HF's Conv1D matrices are (in,out): transposed here.
static trn_result init_load_safetensors(gpt2 *g, const char *path, const init_source *src) {
    trn_safetensors f;
    trn_result r = trn_safetensors_open(&f, path);
    if (r != TRN_OK) return r;
    size_t most = 0;
    for (int i = 0; i < g->m.n_params; i++) most = g->m.params[i]->size > most ? g->m.params[i]->size : most;
    float *buf = (float *)trn_alloc(2 * most * sizeof(float), TRN_KIND_TEMP);
    if (!buf) { trn_safetensors_close(&f); return trn_fail(TRN_ERR_NOMEM, "--init: %s", trn_error_reason()); }
    float *tmp = buf + most;
    for (int i = 0; i < g->m.n_params && r == TRN_OK; i++) {
        trn_tensor *p = g->m.params[i];
        char name[128];
        snprintf(name, sizeof name, "%s%s", src->prefix, p->name);
        const trn_st_tensor *t = trn_safetensors_find(&f, name);
        if (!t) { r = trn_fail(TRN_ERR_MISMATCH, "%s: tensor %s is missing", path, name); break; }
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
        if (is_conv) transpose(buf, tmp, cols, rows); // file (in,out) -> kit (out,in)
        if (p == g->wte && rows < p->shape[0])          // zero padding rows
            memset(buf + rows * cols, 0, sizeof(float) * (size_t)(p->shape[0] - rows) * (size_t)cols);
        trn_write(&g->m, p, buf);
    }
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
            else trn_write(&g->m, (tensor), buf);                                               \
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
// >>data: text or token shards -> one array of token ids -> the kit's loader
// ===========================================================================

// The kit's own text, found next to the program, not in the current
// folder: the program's folder or the one above it (examples/gpt2 -> .),
// from /proc/self/exe (argv[0] where there is no /proc), so the default
// run works from any directory. README, every example, test,
// bench and tool source, the headers, train.h last. The loader validates
// on the last 10% of the tokens, so validation is the end of train.h:
// text like most of the training data (with tools/ or tests/ last, the
// validation loss would mostly measure how different those files are).
// Returns the number of files.
static int kit_corpus_files(const char *argv0, char ***paths_out) {
    static const char *patterns[] = {"README.md", "build.sh", "examples/*.c", "examples/*.cu", "tests/*.c",
                                     "tests/*.cpp", "tests/*.h", "tests/*.sh", "bench/*.c", "tools/*.c",
                                     "train_cuda.h", "train_nccl.h", "train.h"};
    char exe[1024], root[1100], probe[1200];
    struct stat st;
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len > 0) exe[len] = 0;
    else snprintf(exe, sizeof exe, "%s", strchr(argv0, '/') ? argv0 : "./");
    *strrchr(exe, '/') = 0; // the program's folder ("" for a program in /)
    snprintf(root, sizeof root, "%s", exe);
    snprintf(probe, sizeof probe, "%s/train.h", root);
    if (stat(probe, &st) != 0) snprintf(root, sizeof root, "%s/..", exe);
    snprintf(probe, sizeof probe, "%s/train.h", root);
    if (stat(probe, &st) != 0) { *paths_out = NULL; return 0; }
    char **paths = NULL;
    int n = 0, cap = 0;
    for (size_t i = 0; i < sizeof patterns / sizeof patterns[0]; i++) {
        char pat[1200];
        glob_t gl;
        snprintf(pat, sizeof pat, "%s/%s", root, patterns[i]);
        if (glob(pat, 0, NULL, &gl) != 0) continue; // sorted, so the corpus is deterministic
        for (size_t k = 0; k < gl.gl_pathc; k++) {
            if (n == cap) {
                cap = cap ? 2 * cap : 64;
                char **np = (char **)realloc(paths, sizeof(char *) * (size_t)cap);
                if (!np) { globfree(&gl); break; }
                paths = np;
            }
            paths[n] = (char *)malloc(strlen(gl.gl_pathv[k]) + 1);
            if (paths[n]) strcpy(paths[n], gl.gl_pathv[k]), n++;
        }
        globfree(&gl);
    }
    *paths_out = paths;
    return n;
}

// Tokens of the run: --data FILE (text, tokenized; or an llm.c shard,
// read as is) or the kit's own files. Every bad case exits with code 2.
static void load_tokens(trn_tokens *tokens, const char *data, const trn_tokenizer *tok, const char *argv0) {
    memset(tokens, 0, sizeof *tokens);
    if (data) {
        struct stat st;
        if (stat(data, &st) != 0) die("--data %s: %s", data, strerror(errno));
        if (S_ISDIR(st.st_mode)) die("--data %s: is a directory (give a text file or a .bin shard)", data);
        if (st.st_size == 0) die("--data %s: the file is empty", data);
        trn_result r = trn_tokens_load(tokens, data, tok);
        if (r != TRN_OK) die("--data %s: %s", data, trn_error_reason());
        return;
    }
    char **paths = NULL;
    int n = kit_corpus_files(argv0, &paths);
    char *text = NULL;
    size_t len = 0;
    if (n == 0 || trn_text_read_files(&text, &len, (const char *const *)paths, n, 1) != TRN_OK || len == 0)
        die("no --data given and the kit's own text files (train.h, examples/*.c, ...) were not found "
            "next to the program or in the folder above it: pass --data FILE");
    printf("data: the kit's own text, %d files, %zu bytes\n", n, len);
    for (int i = 0; i < n; i++) free(paths[i]);
    free(paths);
    trn_result r = trn_tokenizer_encode(tok, text, len, tokens);
    trn_free(text);
    if (r != TRN_OK) die("tokenizing the kit's text: %s", trn_error_reason());
}

// ===========================================================================
// >>train: evaluation, sampling, the log, the plot, checkpoints
// ===========================================================================

// mean validation loss over n validation batches (fixed, so every
// evaluation sees the same tokens); with --overfit, the loss of the one
// memorized batch already in x, y. Like torch.no_grad(): no tape.
// Rank r of W takes batches r, r+W, ..., (n of them): main averages the W
// means, which is the mean over the first n*W batches, as one rank with a
// W times larger batch would compute it.
static double evaluate(gpt2 *g, trn_loader *ld, int overfit, int n, int *x, int *y, int B, int T, int rank, int world) {
    double sum = 0.0;
    g->m.grad_enabled = 0;
    if (overfit) n = 1;
    for (int i = 0; i < n; i++) {
        if (!overfit) trn_loader_val_batch(ld, (int64_t)i * world + rank, x, y);
        trn_reset(&g->m);
        sum += trn_item(&g->m, gpt2_loss(g, x, y, B, T));
    }
    g->m.grad_enabled = 1;
    return sum / n;
}

// Sample n tokens after the prompt: take the logits of the last position,
// keep the top_k, and draw from softmax(logits / temperature) with the
// kit's RNG. With a key/value cache (kv, window positions), the prompt is
// run once and each new token is a forward of one position; when the
// cache is full (absolute positions cannot slide) it restarts from the
// last half of the window. Without one (kv NULL: the reference the tests
// and bench/gpt2_generate compare with), every token recomputes the whole
// last `window` tokens.
static void sample_text(gpt2 *g, const trn_tokenizer *tok, const int *prompt, int n_prompt, int n, int window,
                        float temperature, int top_k, trn_rng *rng, trn_kv_cache *kv) {
    int V = g->cfg.vocab_size, Vp = g->cfg.padded_vocab, fed = 0; // ctx[0..fed) went into the cache
    int *ctx = (int *)malloc(sizeof(int) * (size_t)(n_prompt + n));
    float *logits = (float *)malloc(sizeof(float) * (size_t)Vp);
    int *idx = (int *)malloc(sizeof(int) * (size_t)V);
    char text[256];
    if (!ctx || !logits || !idx) trn_fatal("sample: out of memory");
    memcpy(ctx, prompt, sizeof(int) * (size_t)n_prompt);
    if (top_k <= 0 || top_k > V) top_k = V;
    g->m.grad_enabled = 0;
    size_t len = trn_tokenizer_decode(tok, ctx, (size_t)n_prompt, text, sizeof text);
    fwrite(text, 1, len < sizeof text ? len : sizeof text - 1, stdout);
    if (kv) trn_kv_cache_reset(kv);
    for (int i = n_prompt; i < n_prompt + n; i++) {
        int start = i > window ? i - window : 0, T = i - start;
        trn_reset(&g->m);
        if (kv) {
            if (fed == 0 || kv->len + (i - fed) > kv->max_T) { // (re)fill: the context's last part
                int keep = fed == 0 ? T : (kv->max_T + 1) / 2;
                trn_kv_cache_reset(kv);
                fed = i - keep;
            }
            trn_tensor *lg = gpt2_forward_cached(g, kv, ctx + fed, 1, i - fed);
            g->m.backend->download(logits, lg->data, sizeof(float) * (size_t)Vp);
            fed = i;
        } else {
            trn_tensor *lg = gpt2_forward(g, ctx + start, 1, T);
            g->m.backend->download(logits, lg->data + (size_t)(T - 1) * Vp, sizeof(float) * (size_t)Vp);
        }
        // top-k by partial selection sort (k is small), then softmax over them
        for (int v = 0; v < V; v++) idx[v] = v;
        for (int k = 0; k < top_k; k++) {
            int best = k;
            for (int v = k + 1; v < V; v++) if (logits[idx[v]] > logits[idx[best]]) best = v;
            int t = idx[k]; idx[k] = idx[best]; idx[best] = t;
        }
        double sum = 0.0, mx = logits[idx[0]];
        for (int k = 0; k < top_k; k++) sum += exp((logits[idx[k]] - mx) / temperature);
        double u = trn_rng_uniform(rng) * sum, acc = 0.0;
        int pick = idx[top_k - 1];
        for (int k = 0; k < top_k; k++) {
            acc += exp((logits[idx[k]] - mx) / temperature);
            if (u < acc) { pick = idx[k]; break; }
        }
        ctx[i] = pick;
        len = trn_tokenizer_decode(tok, &pick, 1, text, sizeof text);
        if (len == 0) len = (size_t)snprintf(text, sizeof text, "<%d>", pick); // no tokenizer knows it
        fwrite(text, 1, len < sizeof text ? len : sizeof text - 1, stdout);
        fflush(stdout);
    }
    g->m.grad_enabled = 1;
    free(ctx);
    free(logits);
    free(idx);
}

// The loss history, for the plot (and read back from --log on --resume).
typedef struct history {
    int n, cap, nv, capv;
    float *step, *loss;    // training loss per step
    float *vstep, *vloss;  // validation loss
} history;

static void hist_push(float **a, float **b, int *n, int *cap, float x, float y) {
    if (*n == *cap) {
        *cap = *cap ? 2 * *cap : 256;
        float *na = (float *)realloc(*a, sizeof(float) * (size_t)*cap), *nb;
        if (!na) return;
        *a = na;
        if (!(nb = (float *)realloc(*b, sizeof(float) * (size_t)*cap))) return;
        *b = nb;
    }
    (*a)[*n] = x;
    (*b)[*n] = y;
    (*n)++;
}

// a validation result: on stdout, into the --log JSONL, into the plot
static void report_val(FILE *logf, history *h, long long step, float val) {
    printf("step %5lld | val_loss %.4f\n", step, val);
    if (logf) {
        fprintf(logf, "{\"step\":%lld,\"val_loss\":%.9g}\n", step, val);
        fflush(logf);
    }
    hist_push(&h->vstep, &h->vloss, &h->nv, &h->capv, (float)step, val);
}

// a number after "key": in one line of our JSONL (or 0 if absent)
static int json_number(const char *line, const char *key, double *out) {
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(line, pat);
    if (!p) return 0;
    *out = strtod(p + strlen(pat), NULL);
    return 1;
}

// On --resume: keep the log's lines up to the checkpoint's step (a run
// killed after its last checkpoint logged steps that will now run again),
// and read the loss history back for the plot.
static void log_truncate_and_read(const char *path, long long upto, history *h) {
    FILE *f = fopen(path, "rb");
    if (!f) return;
    char tmp[1100], line[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *o = fopen(tmp, "wb");
    if (!o) { fclose(f); return; }
    while (fgets(line, sizeof line, f)) {
        double step, v;
        if (!json_number(line, "step", &step) || step > (double)upto) continue;
        fputs(line, o);
        if (json_number(line, "val_loss", &v)) hist_push(&h->vstep, &h->vloss, &h->nv, &h->capv, (float)step, (float)v);
        else if (json_number(line, "loss", &v)) hist_push(&h->step, &h->loss, &h->n, &h->cap, (float)step, (float)v);
    }
    fclose(f);
    if (fclose(o) == 0) rename(tmp, path);
}

// loss.svg: training loss (thin, blue) and validation loss (orange dots),
// hand-written SVG, readable in any browser
static void write_plot(const char *path, const history *h, const char *title) {
    if (h->n == 0 && h->nv == 0) return;
    FILE *f = fopen(path, "w");
    if (!f) { fprintf(stderr, "gpt2: cannot write %s: %s\n", path, strerror(errno)); return; }
    const double W = 800, H = 450, x0 = 70, y0 = 30, pw = 700, ph = 360;
    double xmax = 1, ymin = 1e30, ymax = -1e30;
    for (int i = 0; i < h->n; i++) {
        if (h->step[i] > xmax) xmax = h->step[i];
        if (h->loss[i] < ymin) ymin = h->loss[i];
        if (h->loss[i] > ymax) ymax = h->loss[i];
    }
    for (int i = 0; i < h->nv; i++) {
        if (h->vstep[i] > xmax) xmax = h->vstep[i];
        if (h->vloss[i] < ymin) ymin = h->vloss[i];
        if (h->vloss[i] > ymax) ymax = h->vloss[i];
    }
    if (!(ymax > ymin)) { ymax = ymin + 1; }
    double pad = 0.05 * (ymax - ymin);
    ymin = ymin - pad < 0 ? 0 : ymin - pad;
    ymax += pad;
#define PX(s) (x0 + pw * (s) / xmax)
#define PY(v) (y0 + ph * (1.0 - ((v) - ymin) / (ymax - ymin)))
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" font-family=\"sans-serif\" font-size=\"12\">\n", W, H);
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    fprintf(f, "<text x=\"%.0f\" y=\"18\" font-size=\"14\">%s</text>\n", x0, title);
    for (int k = 0; k <= 5; k++) { // grid and tick labels
        double v = ymin + (ymax - ymin) * k / 5.0, s = xmax * k / 5.0;
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", x0, PY(v), x0 + pw, PY(v));
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%.2f</text>\n", x0 - 6, PY(v) + 4, v);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", PX(s), y0, PX(s), y0 + ph);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%.0f</text>\n", PX(s), y0 + ph + 16, s);
    }
    fprintf(f, "<rect x=\"%.0f\" y=\"%.0f\" width=\"%.0f\" height=\"%.0f\" fill=\"none\" stroke=\"black\"/>\n", x0, y0, pw, ph);
    fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\">step</text>\n", x0 + pw / 2, H - 10);
    fprintf(f, "<text x=\"16\" y=\"%.0f\" transform=\"rotate(-90 16 %.0f)\" text-anchor=\"middle\">loss (nats/token)</text>\n",
            y0 + ph / 2, y0 + ph / 2);
    if (h->n) {
        fprintf(f, "<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"1.2\" points=\"");
        for (int i = 0; i < h->n; i++) fprintf(f, "%.1f,%.1f ", PX(h->step[i]), PY(h->loss[i]));
        fprintf(f, "\"/>\n");
    }
    if (h->nv) {
        fprintf(f, "<polyline fill=\"none\" stroke=\"#ff7f0e\" stroke-width=\"2\" points=\"");
        for (int i = 0; i < h->nv; i++) fprintf(f, "%.1f,%.1f ", PX(h->vstep[i]), PY(h->vloss[i]));
        fprintf(f, "\"/>\n");
        for (int i = 0; i < h->nv; i++)
            fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"#ff7f0e\"/>\n", PX(h->vstep[i]), PY(h->vloss[i]));
    }
    fprintf(f, "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"#1f77b4\" stroke-width=\"2\"/>"
               "<text x=\"%.0f\" y=\"%.0f\">train</text>\n", x0 + pw - 150, y0 + 15, x0 + pw - 125, y0 + 15, x0 + pw - 120, y0 + 19);
    fprintf(f, "<circle cx=\"%.0f\" cy=\"%.0f\" r=\"3.5\" fill=\"#ff7f0e\"/><text x=\"%.0f\" y=\"%.0f\">validation</text>\n",
            x0 + pw - 70, y0 + 15, x0 + pw - 60, y0 + 19);
    fprintf(f, "</svg>\n");
#undef PX
#undef PY
    fclose(f);
}

// The hyperparameters of a run, saved in every checkpoint so that
// `--resume DIR` alone continues the same run (flags given again win).
typedef struct run_args {
    const char *model, *data, *bpe, *out, *resume, *init, *log, *prompt, *dump_logits, *shard;
    long long steps;
    int batch, seq, warmup, grad_accum, eval_every, eval_batches, ckpt_every, keep, sample, threads, top_k;
    float lr, min_lr, weight_decay, clip, temperature;
    long long seed;
    int overfit;
    int recompute; // memory only: not in the checkpoint (results are identical)
    // the loop's extras (>>loop in train.h); -1: from the checkpoint, else off
    const char *tensorboard, *csv;
    int async_ckpt, keep_best, patience, fast_dev_run, profile, limit_val_n;
    float skip_spikes, limit_val; // limit_val: a fraction (written with a '.'), limit_val_n: a count
    double max_time;
} run_args;

static void run_to_meta(const run_args *a, trn_meta *meta) {
    trn_meta_set_u64(meta, "run.batch", (uint64_t)a->batch);
    trn_meta_set_u64(meta, "run.seq", (uint64_t)a->seq);
    trn_meta_set_u64(meta, "run.grad_accum", (uint64_t)a->grad_accum);
    trn_meta_set_u64(meta, "run.warmup", (uint64_t)a->warmup);
    trn_meta_set_u64(meta, "run.steps", (uint64_t)a->steps);
    trn_meta_set_u64(meta, "run.seed", (uint64_t)a->seed);
    trn_meta_set_u64(meta, "run.overfit", (uint64_t)a->overfit);
    trn_meta_set_u64(meta, "run.eval_every", (uint64_t)a->eval_every);
    trn_meta_set_u64(meta, "run.eval_batches", (uint64_t)a->eval_batches);
    trn_meta_set_u64(meta, "run.ckpt_every", (uint64_t)a->ckpt_every);
    trn_meta_set_u64(meta, "run.keep", (uint64_t)a->keep);
    trn_meta_set_u64(meta, "run.sample", (uint64_t)a->sample);
    trn_meta_set_u64(meta, "run.keep_best", (uint64_t)a->keep_best);
    trn_meta_set_u64(meta, "run.patience", (uint64_t)a->patience);
    trn_meta_set_f64(meta, "run.skip_spikes", a->skip_spikes);
    trn_meta_set_f64(meta, "run.lr", a->lr);
    trn_meta_set_f64(meta, "run.min_lr", a->min_lr);
    trn_meta_set_f64(meta, "run.weight_decay", a->weight_decay);
    trn_meta_set_f64(meta, "run.clip", a->clip);
    trn_meta_set(meta, "run.data", a->data ? a->data : "");
    trn_meta_set(meta, "run.bpe", a->bpe ? a->bpe : "");
}

// ===========================================================================
// >>main
// ===========================================================================

static void usage(FILE *f) {
    fprintf(f,
            "usage: gpt2 [flags]          train GPT-2 with train.h (defaults in brackets)\n"
            "model and data\n"
            "  --model NAME       mini | tiny | gpt2 | gpt2-medium | gpt2-large | gpt2-xl [mini]\n"
            "  --data FILE        text file, or llm.c token shard (.bin) [the kit's own text]\n"
            "  --bpe DIR          GPT-2 tokenizer from DIR/vocab.json + DIR/merges.txt [bytes]\n"
            "  --init PATH        start from weights: Hugging Face model.safetensors or llm.c .bin\n"
            "training\n"
            "  --steps N          optimizer steps of the whole run [600]\n"
            "  --batch B          sequences per micro-batch [preset]\n"
            "  --seq T            tokens per sequence [preset]\n"
            "  --grad-accum K     micro-batches per step [1]\n"
            "  --lr X             peak learning rate [preset]\n"
            "  --min-lr X         final learning rate of the cosine [lr/10]\n"
            "  --warmup N         linear warmup steps [steps/20]\n"
            "  --weight-decay X   AdamW decoupled weight decay on matrices [0.1]\n"
            "  --clip X           clip the global gradient norm, 0 = off [1.0]\n"
            "  --seed N           initialization, data order, sampling [1337]\n"
            "  --threads N        OpenMP threads [all cores]\n"
            "  --shard MODE       data parallel: none (DDP) | zero1 | zero2 | fsdp [none]\n"
            "  --overfit          train on one fixed batch (the loss should go to ~0)\n"
            "  --recompute        keep only each block's input; re-run the block in backward\n"
            "                     (activation checkpointing: less memory, same gradients)\n"
            "evaluation, output\n"
            "  --eval-every N     validation every N steps [steps/10]\n"
            "  --eval-batches N   batches per validation [8]\n"
            "  --sample N         tokens to generate at the end [preset: 400 bytes / 100 tokens]\n"
            "  --prompt TEXT      start of the generated text [newline / <|endoftext|>]\n"
            "  --temperature X    [0.8]   --top-k K [40]\n"
            "  --out DIR          checkpoints, model.safetensors, loss.svg [runs/gpt2]\n"
            "  --ckpt-every N     checkpoint every N steps, 0 = never [eval-every]\n"
            "  --keep K           checkpoints kept in --out [3]\n"
            "  --resume PATH      continue from a checkpoint file or run directory (newest valid)\n"
            "  --log FILE         one JSON object per line per step and validation\n"
            "  --dump-logits FILE write the logits of validation batch 0 (float32) at the end\n"
            "  --csv FILE         one CSV row per step (val_loss filled at validation steps)\n"
            "  --tensorboard DIR  TensorBoard event files: loss, val_loss, lr, grad_norm, tokens/s, memory\n"
            "loop policy (Lightning's Trainer and callbacks)\n"
            "  --async-ckpt       write checkpoints from a background thread (training waits for a copy only)\n"
            "  --keep-best K      also keep the K best checkpoints by val_loss (of those at a validation step)\n"
            "                     as best_<step>.safetensors [0]\n"
            "  --patience N       stop after N validations without a new best val_loss [0: never]\n"
            "  --max-time T       stop cleanly with a checkpoint after T seconds (or 90m, 2h)\n"
            "  --limit-val-batches X  validation batches: a count (8), or a fraction of the split (0.25, 1.0)\n"
            "  --fast-dev-run     one training step and one validation batch, no files written\n"
            "  --skip-spikes Z    skip the update when loss or grad norm is Z std above the last 100 [off]\n"
            "  --profile          time and bytes per op kind (forward, backward) after the run\n"
            "  --help\n"
            "data-parallel: start N copies with torchrun --no-python, mpirun, srun, or RANK/WORLD_SIZE\n"
            "  (MASTER_ADDR/MASTER_PORT); --batch is per rank; rank 0 prints and writes the files\n");
}

static long long parse_int(const char *flag, const char *s, long long lo, long long hi) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) die("%s: '%s' is not an integer in [%lld, %lld]", flag, s, lo, hi);
    return v;
}

static float parse_float(const char *flag, const char *s, double lo, double hi) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi)) die("%s: '%s' is not a number in [%g, %g]", flag, s, lo, hi);
    return (float)v;
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
// the newest DIR/ckpt_*.shards whose save finished (has its manifest), or ""
static void latest_shards(const char *dir, char *out, size_t cap) {
    glob_t gl;
    char pat[1100];
    out[0] = 0;
    snprintf(pat, sizeof pat, "%s/ckpt_*.shards/manifest.json", dir);
    if (glob(pat, 0, NULL, &gl) == 0 && gl.gl_pathc > 0) {
        snprintf(out, cap, "%s", gl.gl_pathv[gl.gl_pathc - 1]); // zero-padded steps: the last is the newest
        *strrchr(out, '/') = 0;
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

int main(int argc, char **argv) {
    trn_omp_wait_passive(argv); // OpenMP threads sleep when idle (unless OMP_WAIT_POLICY is set)
    // --- defaults: -1 (or NULL) means "decided below": from the
    // checkpoint when resuming, else from the preset or the other flags
    run_args a;
    memset(&a, 0, sizeof a);
    double t_begin = now_s(); // --max-time counts from here
    a.model = NULL;          // preset name [mini]
    a.out = "runs/gpt2";     // run directory
    a.steps = -1;            // optimizer steps in the whole run [600: ~70 s for mini on 2 cores]
    a.batch = -1;            // B [preset]
    a.seq = -1;              // T [preset]
    a.grad_accum = -1;       // micro-batches per step [1]
    a.lr = -1;               // peak learning rate [preset]
    a.min_lr = -1;           // floor of the cosine [lr / 10]
    a.warmup = -1;           // warmup steps [steps / 20]
    a.weight_decay = -1;     // AdamW weight decay [0.1]
    a.clip = -1;             // gradient clipping [1.0]
    a.seed = -1;             // everything random [1337]
    a.eval_every = -1;       // validation period [steps / 10]
    a.eval_batches = -1;     // batches per validation [8]
    a.ckpt_every = -1;       // checkpoint period [eval_every]
    a.keep = -1;             // checkpoints kept [3]
    a.sample = -1;           // tokens sampled at the end [400 bytes / 100 BPE tokens]
    a.temperature = 0.8f;    // sampling temperature
    a.top_k = 40;            // sample among the k most likely tokens
    a.threads = 0;           // 0: OpenMP's default (all cores)
    a.keep_best = -1;        // best checkpoints kept by val_loss [0: none]
    a.patience = -1;         // early stopping [0: never]
    a.skip_spikes = -1;      // spike guard z threshold [0: off]

    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        if (!strcmp(f, "--help") || !strcmp(f, "-h")) { usage(stdout); return 0; }
        if (!strcmp(f, "--overfit")) { a.overfit = 1; continue; }
        if (!strcmp(f, "--recompute")) { a.recompute = 1; continue; }
        if (!strcmp(f, "--async-ckpt")) { a.async_ckpt = 1; continue; }
        if (!strcmp(f, "--fast-dev-run")) { a.fast_dev_run = 1; continue; }
        if (!strcmp(f, "--profile")) { a.profile = 1; continue; }
        static const char *with_value[] = {"--model", "--data", "--bpe", "--init", "--out", "--resume", "--log",
                                           "--prompt", "--dump-logits", "--steps", "--batch", "--seq",
                                           "--grad-accum", "--warmup", "--eval-every", "--eval-batches",
                                           "--ckpt-every", "--keep", "--sample", "--top-k", "--threads", "--seed",
                                           "--lr", "--min-lr", "--weight-decay", "--clip", "--temperature",
                                           "--csv", "--tensorboard", "--keep-best", "--patience", "--max-time",
                                           "--limit-val-batches", "--skip-spikes", "--shard"};
        int known = 0;
        for (size_t k = 0; k < sizeof with_value / sizeof with_value[0]; k++) known |= !strcmp(f, with_value[k]);
        if (!known) die("unknown %s '%s' (see --help)", strncmp(f, "--", 2) ? "argument" : "flag", f);
        if (i + 1 >= argc) die("%s needs a value (see --help)", f);
        const char *v = argv[++i];
        if (!strcmp(f, "--model")) a.model = v;
        else if (!strcmp(f, "--shard")) a.shard = v;
        else if (!strcmp(f, "--data")) a.data = v;
        else if (!strcmp(f, "--bpe")) a.bpe = v;
        else if (!strcmp(f, "--init")) a.init = v;
        else if (!strcmp(f, "--out")) a.out = v;
        else if (!strcmp(f, "--resume")) a.resume = v;
        else if (!strcmp(f, "--log")) a.log = v;
        else if (!strcmp(f, "--prompt")) a.prompt = v;
        else if (!strcmp(f, "--dump-logits")) a.dump_logits = v;
        else if (!strcmp(f, "--steps")) a.steps = parse_int(f, v, 0, 1000000000);
        else if (!strcmp(f, "--batch")) a.batch = (int)parse_int(f, v, 1, 1 << 20);
        else if (!strcmp(f, "--seq")) a.seq = (int)parse_int(f, v, 1, 1 << 20);
        else if (!strcmp(f, "--grad-accum")) a.grad_accum = (int)parse_int(f, v, 1, 1 << 20);
        else if (!strcmp(f, "--warmup")) a.warmup = (int)parse_int(f, v, 0, 1000000000);
        else if (!strcmp(f, "--eval-every")) a.eval_every = (int)parse_int(f, v, 0, 1000000000);
        else if (!strcmp(f, "--eval-batches")) a.eval_batches = (int)parse_int(f, v, 1, 1 << 20);
        else if (!strcmp(f, "--ckpt-every")) a.ckpt_every = (int)parse_int(f, v, 0, 1000000000);
        else if (!strcmp(f, "--keep")) a.keep = (int)parse_int(f, v, 1, 1000000);
        else if (!strcmp(f, "--sample")) a.sample = (int)parse_int(f, v, 0, 1 << 20);
        else if (!strcmp(f, "--top-k")) a.top_k = (int)parse_int(f, v, 1, 1 << 24);
        else if (!strcmp(f, "--threads")) a.threads = (int)parse_int(f, v, 1, 4096);
        else if (!strcmp(f, "--seed")) a.seed = parse_int(f, v, 0, (long long)9e18);
        else if (!strcmp(f, "--lr")) a.lr = parse_float(f, v, 1e-12, 10);
        else if (!strcmp(f, "--min-lr")) a.min_lr = parse_float(f, v, 0, 10);
        else if (!strcmp(f, "--weight-decay")) a.weight_decay = parse_float(f, v, 0, 10);
        else if (!strcmp(f, "--clip")) a.clip = parse_float(f, v, 0, 1e9);
        else if (!strcmp(f, "--temperature")) a.temperature = parse_float(f, v, 1e-3, 100);
        else if (!strcmp(f, "--csv")) a.csv = v;
        else if (!strcmp(f, "--tensorboard")) a.tensorboard = v;
        else if (!strcmp(f, "--keep-best")) a.keep_best = (int)parse_int(f, v, 0, 1000000);
        else if (!strcmp(f, "--patience")) a.patience = (int)parse_int(f, v, 0, 1000000000);
        else if (!strcmp(f, "--limit-val-batches") && strchr(v, '.')) a.limit_val = parse_float(f, v, 1e-9, 1);
        else if (!strcmp(f, "--limit-val-batches")) a.limit_val_n = (int)parse_int(f, v, 1, 1 << 20);
        else if (!strcmp(f, "--skip-spikes")) a.skip_spikes = parse_float(f, v, 0, 1e6);
        else if (!strcmp(f, "--max-time")) { // seconds, or with a unit: 90m, 2h
            char *end;
            double t = strtod(v, &end), unit = !strcmp(end, "h") ? 3600 : !strcmp(end, "m") ? 60 : 1;
            if (end == v || !(t > 0) || (*end && strcmp(end, "s") && unit == 1)) die("--max-time: '%s' is not like 3600, 90m or 2h", v);
            a.max_time = t * unit;
        }
    }
    if (a.fast_dev_run && a.resume) die("--fast-dev-run is a fresh smoke test: not with --resume");
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
    const int W = ddp.world, main_rank = trn_ddp_is_main(&ddp);
    if (!main_rank && !freopen("/dev/null", "w", stdout)) die("rank %d: /dev/null: %s", ddp.rank, strerror(errno));
    if (W > 1) printf("ddp: %d ranks started by %s, communicator %s\n", W, ddp.env.launcher, ddp.comm.name);

    // --- resume: find the checkpoint, read its model config and run flags
    char ckpt_path[1024] = "", shards_dir[1024] = "";
    trn_safetensors ck;
    int have_ck = 0;
    if (a.resume) {
        struct stat st;
        if (stat(a.resume, &st) != 0) die("--resume %s: %s", a.resume, strerror(errno));
        if (S_ISDIR(st.st_mode)) { // a sharded checkpoint itself, or a run directory with some
            struct stat mst;
            snprintf(ckpt_path, sizeof ckpt_path, "%s/manifest.json", a.resume);
            if (stat(ckpt_path, &mst) == 0) snprintf(shards_dir, sizeof shards_dir, "%s", a.resume);
            else latest_shards(a.resume, shards_dir, sizeof shards_dir);
            ckpt_path[0] = 0;
        }
        if (shards_dir[0]) {
            if (!shards_rank0(shards_dir, ckpt_path, sizeof ckpt_path)) die("--resume %s: no rank-00000 file", shards_dir);
        } else if (S_ISDIR(st.st_mode)) {
            long long s;
            trn_result r = trn_checkpoint_latest(a.resume, ckpt_path, sizeof ckpt_path, &s);
            if (r != TRN_OK) die("--resume %s: %s", a.resume, trn_error_reason());
        } else {
            snprintf(ckpt_path, sizeof ckpt_path, "%s", a.resume);
        }
        if (trn_safetensors_open(&ck, ckpt_path) != TRN_OK) die("--resume %s: %s", ckpt_path, trn_error_reason());
        if (st_meta_long(&ck, "gpt2.n_layer") < 0 || st_meta_long(&ck, "run.step") < 0)
            die("--resume %s: not a checkpoint of examples/gpt2 (no gpt2.* / run.* metadata)", ckpt_path);
        have_ck = 1;
        if (a.init) { printf("note: --resume wins over --init\n"); a.init = NULL; }
    }
#define FROM_CK_INT(field, key) do { if (a.field < 0 && have_ck && st_meta_long(&ck, key) >= 0) a.field = st_meta_long(&ck, key); } while (0)
#define FROM_CK_F(field, key) do { const char *s_ = have_ck ? trn_safetensors_meta(&ck, key) : NULL; if (a.field < 0 && s_) a.field = (float)atof(s_); } while (0)
#define FROM_CK_STR(field, key) do { const char *s_ = have_ck ? trn_safetensors_meta(&ck, key) : NULL; if (!a.field && s_ && *s_) a.field = strdup(s_); } while (0)
    FROM_CK_INT(batch, "run.batch");
    FROM_CK_INT(seq, "run.seq");
    FROM_CK_INT(grad_accum, "run.grad_accum");
    FROM_CK_INT(warmup, "run.warmup");
    FROM_CK_INT(steps, "run.steps");
    FROM_CK_INT(seed, "run.seed");
    FROM_CK_INT(eval_every, "run.eval_every");
    FROM_CK_INT(eval_batches, "run.eval_batches");
    FROM_CK_INT(ckpt_every, "run.ckpt_every");
    FROM_CK_INT(keep, "run.keep");
    FROM_CK_INT(sample, "run.sample");
    FROM_CK_INT(keep_best, "run.keep_best");
    FROM_CK_INT(patience, "run.patience");
    FROM_CK_F(skip_spikes, "run.skip_spikes");
    FROM_CK_F(lr, "run.lr");
    FROM_CK_F(min_lr, "run.min_lr");
    FROM_CK_F(weight_decay, "run.weight_decay");
    FROM_CK_F(clip, "run.clip");
    FROM_CK_STR(data, "run.data");
    FROM_CK_STR(bpe, "run.bpe");
    if (have_ck && st_meta_long(&ck, "run.overfit") == 1) a.overfit = 1;

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
    if (a.bpe) {
        if (trn_tokenizer_load_bpe_dir(&tok, a.bpe) != TRN_OK) die("--bpe %s: %s", a.bpe, trn_error_reason());
        if (!have_ck && !a.init && cfg.vocab_size != tok.vocab_size) { // a fresh model takes the tokenizer's size
            cfg.vocab_size = tok.vocab_size;
            cfg.padded_vocab = pad_vocab(tok.vocab_size);
        }
        if (tok.vocab_size > cfg.vocab_size)
            die("--bpe %s: %d tokens, but the model predicts only %d", a.bpe, tok.vocab_size, cfg.vocab_size);
    } else {
        trn_tokenizer_init_bytes(&tok);
    }

    // --- the rest of the defaults
    if (a.steps < 0) a.steps = 600;
    if (a.batch < 0) a.batch = pre->batch;
    if (a.seq < 0) a.seq = pre->seq < cfg.block_size ? pre->seq : cfg.block_size;
    if (a.grad_accum < 0) a.grad_accum = 1;
    if (a.lr < 0) a.lr = pre->lr;
    if (a.min_lr < 0) a.min_lr = a.lr / 10;
    if (a.warmup < 0) a.warmup = (int)(a.steps / 20);
    if (a.weight_decay < 0) a.weight_decay = 0.1f;
    if (a.clip < 0) a.clip = 1.0f;
    if (a.seed < 0) a.seed = 1337;
    if (a.eval_every < 0) a.eval_every = a.steps >= 10 ? (int)(a.steps / 10) : 1;
    if (a.ckpt_every < 0) a.ckpt_every = a.eval_every;
    if (a.eval_batches < 0) a.eval_batches = 8;
    if (a.keep < 0) a.keep = 3;
    if (a.sample < 0) a.sample = cfg.vocab_size <= 256 ? 400 : 100;
    if (a.keep_best < 0) a.keep_best = 0;
    if (a.patience < 0) a.patience = 0;
    if (a.skip_spikes < 0) a.skip_spikes = 0;
    if (a.fast_dev_run) { // Lightning's fast_dev_run: one batch of each, nothing on disk
        a.steps = 1; a.eval_every = 0; a.eval_batches = 1; a.ckpt_every = 0; a.sample = 0;
        a.log = a.csv = a.tensorboard = a.dump_logits = NULL;
    }
    if (a.seq > cfg.block_size) die("--seq %d is longer than the model's context of %d tokens", a.seq, cfg.block_size);
    if (a.min_lr > a.lr) die("--min-lr %g is above --lr %g", a.min_lr, a.lr);
    if (!a.bpe && cfg.vocab_size > 256 && !a.data && a.steps > 0)
        die("the model has a %d-token vocabulary: give --bpe DIR (GPT-2's vocab.json + merges.txt) or --data SHARD.bin",
            cfg.vocab_size);
    int B = a.batch, T = a.seq;

    // --- data: tokens -> checked against the vocabulary -> loader
    trn_tokens tokens;
    if (a.data && !a.bpe && cfg.vocab_size > 256) {
        // a text file cannot be read without the BPE tokenizer; a shard can
        FILE *fp = fopen(a.data, "rb");
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
    if (a.limit_val_n > 0 && !a.fast_dev_run) a.eval_batches = a.limit_val_n; // Lightning's int: a count
    if (a.limit_val > 0 && !a.fast_dev_run) // its float: a fraction of this rank's share of the split
        a.eval_batches = (int)fmax(1, floor(a.limit_val * (double)(ld.val_batches / W)));
    if ((int64_t)a.eval_batches * W > ld.val_batches && ld.val_batches >= W) a.eval_batches = (int)(ld.val_batches / W);
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
    trn_spike_guard guard; // --skip-spikes: its window goes into the checkpoint
    trn_spike_guard_init(&guard, a.skip_spikes);
    trn_early_stop early;  // --patience: its best and count too
    trn_early_stop_init(&early, a.patience);

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
        uint64_t u;
        trn_meta_get_u64(&meta, "run.step", &u);
        step = (long long)u;
        if (trn_meta_get_u64(&meta, "run.sample_rng", &u) == TRN_OK) sample_rng.state = u;
        CHECK_OK(trn_spike_guard_load(&guard, &meta));
        CHECK_OK(trn_early_stop_load(&early, &meta));
        trn_loader_pos pos;
        uint64_t e = 0, b = 0;
        if (trn_meta_get_u64(&meta, "run.data_epoch", &e) != TRN_OK || trn_meta_get_u64(&meta, "run.data_batch", &b) != TRN_OK ||
            trn_meta_get_u64(&meta, "run.data_seed", &pos.seed) != TRN_OK ||
            trn_meta_get_u64(&meta, "run.data_check", &pos.check) != TRN_OK)
            die("--resume %s: no data position in the checkpoint", ckpt_path);
        pos.epoch = (int64_t)e;
        pos.batch = (int64_t)b;
        if (trn_loader_seek(&ld, &pos) != TRN_OK)
            die("--resume %s: the data differs from the run's (%s)", ckpt_path, trn_error_reason());
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
    if (main_rank && a.log && !(logf = fopen(a.log, have_ck ? "a" : "w"))) die("--log %s: %s", a.log, strerror(errno));
    // >>loop: progress and ETA, CSV, TensorBoard, async checkpoints, profile
    trn_progress prog;
    trn_progress_init(&prog, step, a.steps);
    trn_csv csv;
    if (main_rank && a.csv && trn_csv_open(&csv, a.csv, "step,loss,val_loss,lr,grad_norm,ms,tok_per_s,mem_bytes,skipped",
                                           have_ck ? step : -1) != TRN_OK)
        die("--csv %s", trn_error_reason());
    trn_tb_writer tb;
    memset(&tb, 0, sizeof tb);
    if (main_rank && a.tensorboard && trn_tb_open(&tb, a.tensorboard) != TRN_OK) die("--tensorboard %s", trn_error_reason());
    trn_ckpt_async ack;
    memset(&ack, 0, sizeof ack);
    ack.keep = a.keep;
#ifdef TRN_USE_CUDA
    ack.host_alloc = trn_cuda_host_alloc; // pinned: the device-to-host copy at full speed
    ack.host_free = trn_cuda_host_free;
#endif
    trn_profile prof;
    if (a.profile) trn_profile_attach(&prof, &g.m);
#ifdef TRN_USE_CUDA
    if (a.profile) trn_cuda_profile_clock(&prof); // CUDA events: no sync per op
#endif
    const char *stop = NULL; // why the loop ended early (--patience, --max-time)

    char path[1200], title[256];
    snprintf(title, sizeof title, "examples/gpt2: L=%d C=%d, %s, batch %dx%d", cfg.n_layer, cfg.n_embd,
             a.data ? a.data : "the kit's text", B, T);
    double t_start = now_s();
    long long first_step = step + 1;
    float first_loss = -1, last_loss = -1, val = -1;
    long long val_step = -1;

#define VALIDATE()                                                                                 \
    (trn_progress_break(&prog), val = validate(&g, &ld, a.overfit, a.eval_batches, x, y, B, T), val_step = step, \
     report_val(logf, &hist, step, val), tb.f ? trn_tb_scalar(&tb, "val_loss", step, val) : TRN_OK)
    if (step == 0 && a.eval_every > 0 && a.steps > 0) {
        VALIDATE();
        trn_early_stop_update(&early, step, val);
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
        int skipped = a.skip_spikes > 0 && trn_spike_guard_check(&guard, loss, norm);
        if (a.skip_spikes > 0 && !skipped) {
            DDP_OK(trn_ddp_adamw_step(&ddp, &opt, &g.m, lr));
            trn_sync(&g.m);
        }
        step++;
        double ms = 1e3 * (now_s() - t0), tps = (double)B * T * a.grad_accum * W / (ms / 1e3);
        size_t mem = trn_ledger_total(TRN_HOST) + trn_ledger_total(TRN_DEVICE);
        if (first_loss < 0) first_loss = loss;
        last_loss = loss;
        char line[256];
        snprintf(line, sizeof line, "step %5lld/%lld | loss %.4f | lr %.2e | norm %.3f | %7.1f ms | %6.0f tok/s | mem %.1f MiB",
                 step, a.steps, loss, lr, norm, ms, tps, mem / 1048576.0);
        trn_progress_step(&prog, step, loss, tps, line); // + ETA; on a terminal, in place
        if (skipped) {
            trn_progress_break(&prog);
            printf("step %5lld | spike: loss z %.1f, norm z %.1f (--skip-spikes %g): update skipped (%lld so far)\n", step,
                   guard.z_loss, guard.z_norm, a.skip_spikes, guard.skipped);
        }
        if (logf)
            fprintf(logf, "{\"step\":%lld,\"loss\":%.9g,\"lr\":%.9g,\"grad_norm\":%.9g,\"ms\":%.3f,\"tok_per_s\":%.1f,\"mem_bytes\":%zu%s}\n",
                    step, loss, lr, norm, ms, tps, mem, skipped ? ",\"skipped\":1" : ""), fflush(logf);
        if (tb.f) {
            CHECK_OK(trn_tb_scalar(&tb, "loss", step, loss));
            CHECK_OK(trn_tb_scalar(&tb, "lr", step, lr));
            CHECK_OK(trn_tb_scalar(&tb, "grad_norm", step, norm));
            CHECK_OK(trn_tb_scalar(&tb, "tokens_per_s", step, tps));
            CHECK_OK(trn_tb_memory(&tb, step));
        }
        hist_push(&hist.step, &hist.loss, &hist.n, &hist.cap, (float)step, loss);
        int force_ckpt = 0; // a stop (--patience, --max-time) leaves a checkpoint to resume from
        if (a.eval_every > 0 && (step % a.eval_every == 0 || step == a.steps)) {
            VALIDATE();
            snprintf(path, sizeof path, "%s/loss.svg", a.out);
            if (files) write_plot(path, &hist, title);
            if (trn_early_stop_update(&early, step, val) && step < a.steps)
                stop = "early stopping (--patience)", force_ckpt = 1;
        }
        if (a.max_time > 0 && step < a.steps) { // every rank stops at the same step: any rank's clock decides
            double over = now_s() - t_begin >= a.max_time;
            DDP_OK(trn_ddp_allreduce_host(&ddp, &over, 1, 0));
            if (over > 0) stop = "--max-time", force_ckpt = 1;
        }
        if (a.csv && main_rank) {
            double row[9] = {(double)step, loss, val_step == step ? val : NAN, lr, norm, ms, tps, (double)mem, (double)skipped};
            CHECK_OK(trn_csv_row(&csv, row));
        }
        if (tb.f) CHECK_OK(trn_tb_flush(&tb));
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
            trn_loader_pos pos = trn_loader_tell(&ld);
            trn_meta_set_u64(&meta, "run.step", (uint64_t)step);
            trn_meta_set_u64(&meta, "run.sample_rng", sample_rng.state);
            trn_meta_set_u64(&meta, "run.data_epoch", (uint64_t)pos.epoch);
            trn_meta_set_u64(&meta, "run.data_batch", (uint64_t)pos.batch);
            trn_meta_set_u64(&meta, "run.data_seed", pos.seed);
            trn_meta_set_u64(&meta, "run.data_check", pos.check);
            if (a.skip_spikes > 0) trn_spike_guard_save(&guard, &meta);
            trn_early_stop_save(&early, &meta);
            if (val_step == step) trn_meta_set_f64(&meta, "val_loss", val); // ranks --keep-best
            trn_progress_break(&prog);
            if (sharded_ckpt) { // every rank its slice, rank 0 the manifest last
                snprintf(path, sizeof path, "%s/ckpt_%08lld.shards", a.out, step);
                DDP_OK(trn_ddp_checkpoint_save_sharded(&ddp, path, &g.m, &opt, &meta));
                if (main_rank) prune_shards(a.out, a.keep);
                printf("checkpoint %s\n", path);
            } else if (a.async_ckpt) { // a copy now, the file from a background thread while training goes on
                ack.keep_best = val_step == step ? a.keep_best : 0;
                CHECK_OK(trn_checkpoint_save_async(&ack, a.out, step, &g.m, &opt, &meta));
                printf("checkpoint %s (async: training waited %.1f ms, %.1f ms of it for the previous save)\n", ack.path,
                       1e3 * ack.stage_seconds, 1e3 * ack.wait_seconds);
            } else {
                double ts = now_s();
                CHECK_OK(trn_checkpoint_save_dir(a.out, step, a.keep, &g.m, &opt, &meta, path, sizeof path));
                if (a.keep_best > 0 && val_step == step) CHECK_OK(trn_checkpoint_keep_best(a.out, path, a.keep_best));
                printf("checkpoint %s (training waited %.1f ms)\n", path, 1e3 * (now_s() - ts));
            }
        }
        if (stop) {
            trn_progress_break(&prog);
            printf("stopped at step %lld: %s (best val_loss %.4f at step %lld); --resume %s continues\n", step, stop,
                   early.best, early.best_step, a.out);
            break;
        }
    }
    trn_progress_break(&prog);
    if (ack.saves) { // the last async save must be on disk before we go on
        CHECK_OK(trn_checkpoint_wait(&ack));
        printf("async checkpoints: %lld written in the background, the last in %.2f s\n", ack.saves, ack.write_seconds);
    }
    trn_ckpt_async_free(&ack);
    if (a.profile) {
        trn_profile_print(&prof, stdout);
        trn_profile_free(&prof);
    }
    double wall = now_s() - t_start;

    // --- the end: a final validation, the plot, the weights, a sample
    if (val_step != step || a.eval_every == 0) VALIDATE();
    if (tb.f) CHECK_OK(trn_tb_close(&tb));
    if (a.csv && main_rank) CHECK_OK(trn_csv_close(&csv));
    if (first_loss >= 0)
        printf("trained steps %lld..%lld in %.1f s: loss %.4f -> %.4f, val_loss %.4f\n", first_step, step, wall,
               first_loss, last_loss, val);
    printf("final val_loss %.9g\n", val);
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
    if (a.dump_logits && main_rank) { // the logits of validation batch 0, for comparisons
        FILE *f = fopen(a.dump_logits, "wb");
        if (!f) die("--dump-logits %s: %s", a.dump_logits, strerror(errno));
        if (!a.overfit) trn_loader_val_batch(&ld, 0, x, y); // (--overfit: its one batch)
        g.m.grad_enabled = 0;
        trn_reset(&g.m);
        trn_tensor *lg = gpt2_forward(&g, x, B, T);
        float *host = (float *)malloc(sizeof(float) * lg->size);
        if (!host) die("out of memory");
        trn_read(&g.m, lg, host);
        fwrite(host, sizeof(float), lg->size, f);
        fclose(f);
        free(host);
        g.m.grad_enabled = 1;
    }
    if (a.sample > 0 && main_rank) {
        trn_tokens p;
        memset(&p, 0, sizeof p);
        int start[1];
        start[0] = cfg.vocab_size <= 256 ? '\n' : (tok.eot_id >= 0 ? tok.eot_id : 0);
        const int *prompt = start;
        int n_prompt = 1;
        if (a.prompt && *a.prompt) {
            if (trn_tokenizer_encode(&tok, a.prompt, strlen(a.prompt), &p) != TRN_OK) die("--prompt: %s", trn_error_reason());
            if (trn_tokens_check(p.ids, p.n, cfg.vocab_size) != TRN_OK) die("--prompt: %s", trn_error_reason());
            prompt = p.ids;
            n_prompt = (int)(p.n < (size_t)T ? p.n : (size_t)T);
        }
        printf("---- sample (%d tokens, temperature %g, top-k %d) ----\n", a.sample, a.temperature, a.top_k);
        trn_kv_cache kv; // keys and values of the context: one position per new token
        CHECK_OK(trn_kv_cache_init(&kv, &g.m, cfg.n_layer, 1, T, cfg.n_head, cfg.n_embd / cfg.n_head));
        sample_text(&g, &tok, prompt, n_prompt, a.sample, T, a.temperature, a.top_k, &sample_rng, &kv);
        trn_kv_cache_free(&kv);
        printf("\n----\n");
        trn_tokens_free(&p);
    }
    if (logf) fclose(logf);
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
