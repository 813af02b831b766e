// linear_memory - the 20000x20000 memory experiment, line by line.
//
// Where does the memory of a training step go? The model is the one of a
// PyTorch Lightning GPU memory trace (its figures are in >>seed below):
//
//   Linear(20000,20000) -> ReLU -> Linear(20000,20000) -> ReLU -> Linear(20000,1)
//   800,060,001 fp32 parameters = 3,200,240,004 bytes = 3.20 GB = 2.98 GiB
//
// trained on a synthetic regression batch (MSE) with AdamW, one device, and
// a data-parallel wrapper of world size 1. After every line of the training
// step the program prints the ledger: the bytes train.h counted, per kind,
// and what the OS says (RSS; on CUDA the driver's cudaMemGetInfo), in GiB
// (2^30, what PyTorch prints) and GB (10^9). At the end a table puts each
// phase beside the Lightning figure, with one sentence on why they differ,
// and an SVG chart of memory by kind per phase is written to --out.
//
// The arithmetic to expect (P = parameter bytes = 3.20 GB):
//   standard step   weights + grads + m + v  = 4 P = 12.8 GB  (+ a few MB)
//   --fused-step    weights + m + v + 1 block = 3 P =  9.6 GB  (+ one block)
// Lightning peaked at 18.79 GiB (20.2 GB) on the same model.
//
// --fused-step applies AdamW inside backward: for each linear layer, last to
// first, it computes the input gradient first (that needs the OLD weight),
// then produces the weight gradient a block of rows at a time, applies AdamW
// to that block at once and reuses the block buffer. No full gradient ever
// exists, so global-norm clipping (which needs all of them before the first
// update) is impossible in this mode: --fused-step with --clip is an error.
//
// build: -pthread
//
// Run:
//   ./build.sh
//   examples/linear_memory                     # the real one: ~13 GB, ~10 GB checkpoint on disk
//   examples/linear_memory --fused-step        # ~10 GB
//   examples/linear_memory --width 2000        # same phases and ratios, 100x smaller
//
// The lines at the end ("param_bytes N", "peak_kit_bytes N", ...) are for
// scripts: tests/test_linear_memory.sh checks the ledger arithmetic with them.
//
// On CUDA: examples/linear_memory_cuda.cu is this file with TRN_USE_CUDA
// defined; the model is created in host memory, then moved to the device
// like model.to("cuda"), and every other line is the same.
#define TRAIN_IMPLEMENTATION
#include "train.h"
#include "extras/train_run.h" // run directories: keep-K, resume, async saves
#ifdef TRN_USE_CUDA
#define TRAIN_CUDA_IMPLEMENTATION
#include "train_cuda.h"
#else
#define TRAIN_NCCL_CPU_ONLY   // no NCCL on the CPU: world size 1 needs no communication
#endif
#define TRAIN_NCCL_IMPLEMENTATION
#include "train_nccl.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define GIB 1073741824.0
#define GB 1e9

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// a kit call that can fail (files, memory): print where, why, and stop
#define TRY(call)                                                                        \
    do {                                                                                 \
        trn_result try_rc_ = (call);                                                     \
        if (try_rc_ != TRN_OK) {                                                         \
            fprintf(stderr, "linear_memory: %s:%d: %s: %s\n", __FILE__, __LINE__,        \
                    trn_result_string(try_rc_), trn_error_reason());                     \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)

// ===========================================================================
// >>seed: what the Lightning trace measured (GiB on the GPU, cumulative)
//
// Trainer(devices=1, strategy="ddp") on the same three layers. NAN: the
// trace has no figure for that line.
// ===========================================================================
enum {
    PH_CREATED, PH_DEVICE, PH_DDP, PH_FORWARD, PH_LOSS, PH_BACKWARD, PH_CLIP, PH_STEP1, PH_STEP2,
    PH_CKPT, PH_COUNT
};
static const char *phase_name[PH_COUNT] = {
    "model created", "on the device", "DDP set up", "forward", "loss",
    "backward", "clip", "first AdamW step", "second step", "checkpoint saved"};
static const char *phase_short[PH_COUNT] = {
    "created", "on device", "DDP", "forward", "loss", "backward", "clip", "step 1", "step 2", "checkpoint"};
static const double seed_gib[PH_COUNT] = {
    NAN,   // model built in host RAM: nothing on the GPU yet
    3.85,  // strategy.model_to_device()
    9.82,  // DistributedDataParallel(...): +5.97 (6.84 after resume_end's empty_cache)
    6.88,  // 6.84 + 0.04 logged at on_before_backward (forward and loss together)
    NAN,   // (inside training_step, in the row above)
    9.85,  // + 2.97 logged at on_after_backward
    NAN,   // Lightning does not clip unless gradient_clip_val is set
    18.79, // optimizer.step(): the peak of the run
    NAN, NAN};

// ===========================================================================
// >>config
// ===========================================================================
typedef struct config {
    int width;        // 20000: the real experiment
    int batch;        // 8 rows: activations stay tiny, the point is the rest
    int steps;        // 2: the first step (moments appear) and steady state
    float lr;         // AdamW learning rate: 0.04 / width unless given. Adam's
                      // first step moves every weight by about lr, and a unit of
                      // a width-W layer adds up W such moves, so a stable lr
                      // shrinks as 1/W (the muP rule): 2e-6 at width 20000
    float clip;       // global-norm clipping (standard step only); 0 = off
    int clip_given;   // --clip was on the command line
    int fused;        // --fused-step
    int block_rows;   // fused: rows of a weight gradient produced at once
    uint64_t seed;
    int threads;
    const char *out;  // where the chart and the checkpoint go
    int async_ckpt;   // --async-ckpt: a copy into host staging, written by a thread
    int ckpt_every;   // also checkpoint after every N steps (0: at the end only)
    trn_shard_mode shard; // several ranks: what each keeps (see >>ranks)
    int no_save;      // --no-save: skip the checkpoint phase
} config;

static void usage(FILE *f) {
    fprintf(f,
            "usage: linear_memory [options]\n"
            "  The 20000x20000 memory experiment: prints the memory ledger after every line\n"
            "  of a training step, compares it with PyTorch Lightning, writes an SVG chart.\n"
            "  --width N        layer width (default 20000, the real experiment; 2000 for CI)\n"
            "  --batch N        rows per batch (default 8)\n"
            "  --steps N        training steps, at least 2 (default 2)\n"
            "  --lr X           AdamW learning rate (default 0.04/width: 2e-6 at 20000)\n"
            "  --clip X         clip the global gradient norm to X (default 1.0; 0 = off;\n"
            "                   not possible with --fused-step)\n"
            "  --fused-step     apply AdamW inside backward, block by block: no gradient buffer\n"
            "  --block-rows N   fused: weight-gradient rows per block (default width/64)\n"
            "  --seed N         RNG seed (default 1)\n"
            "  --threads N      OpenMP threads (default: all)\n"
            "  --out DIR        chart and checkpoint go here (default runs/linear_memory)\n"
            "  --ckpt-every N   also checkpoint after every N steps (default 0: at the end only)\n"
            "  --async-ckpt     copy the state into host staging (+3 P) and write it from a\n"
            "                   background thread while the program goes on (DIR/ckpt_<step>)\n"
            "  --shard MODE     with several ranks (torchrun, mpirun, srun): none (DDP) | zero1 |\n"
            "                   zero2 | fsdp (default none); prints every rank's memory beside\n"
            "                   what the mode predicts\n"
            "  --no-save        skip the checkpoint (phase 10)\n"
            "  --help           this text\n");
}

static int parse_int(const char *flag, const char *s, int lo, int hi, int *out) {
    char *end;
    long v;
    errno = 0;
    v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "linear_memory: %s wants an integer in [%d, %d], got '%s'\n", flag, lo, hi, s);
        return 0;
    }
    *out = (int)v;
    return 1;
}

static int parse_float(const char *flag, const char *s, float lo, float hi, float *out) {
    char *end;
    double v;
    errno = 0;
    v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi)) {
        fprintf(stderr, "linear_memory: %s wants a number in [%g, %g], got '%s'\n", flag, lo, hi, s);
        return 0;
    }
    *out = (float)v;
    return 1;
}

// returns 0 to go on, or the exit code (0 for --help, 2 for bad input)
static int parse_args(int argc, char **argv, config *c, int *exit_code) {
    int i, seed = 1;
    c->width = 20000; c->batch = 8; c->steps = 2; c->lr = 0.0f; c->clip = 1.0f; c->clip_given = 0;
    c->fused = 0; c->block_rows = 0; c->seed = 1; c->threads = 0; c->async_ckpt = 0; c->ckpt_every = 0;
    c->out = "runs/linear_memory";
    c->shard = TRN_SHARD_NONE; c->no_save = 0;
    *exit_code = 0;
    for (i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int ok = 1, takes = 1;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 1; }
        if (!strcmp(a, "--fused-step")) { c->fused = 1; continue; }
        if (!strcmp(a, "--async-ckpt")) { c->async_ckpt = 1; continue; }
        if (!strcmp(a, "--no-save")) { c->no_save = 1; continue; }
        if (!v) {
            fprintf(stderr, "linear_memory: unknown flag or missing value: '%s' (see --help)\n", a);
            *exit_code = 2; return 1;
        }
        if (!strcmp(a, "--width")) ok = parse_int(a, v, 4, 46340, &c->width);
        else if (!strcmp(a, "--batch")) ok = parse_int(a, v, 1, 4096, &c->batch);
        else if (!strcmp(a, "--steps")) ok = parse_int(a, v, 2, 1000000, &c->steps);
        else if (!strcmp(a, "--lr")) ok = parse_float(a, v, 1e-12f, 10.0f, &c->lr);
        else if (!strcmp(a, "--clip")) { ok = parse_float(a, v, 0.0f, 1e30f, &c->clip); c->clip_given = 1; }
        else if (!strcmp(a, "--block-rows")) ok = parse_int(a, v, 1, 46340, &c->block_rows);
        else if (!strcmp(a, "--seed")) { ok = parse_int(a, v, 0, 2147483647, &seed); c->seed = (uint64_t)seed; }
        else if (!strcmp(a, "--threads")) ok = parse_int(a, v, 1, 1024, &c->threads);
        else if (!strcmp(a, "--out")) c->out = v;
        else if (!strcmp(a, "--ckpt-every")) ok = parse_int(a, v, 0, 1000000, &c->ckpt_every);
        else if (!strcmp(a, "--shard")) {
            if (trn_shard_parse(v, &c->shard) != TRN_OK) { fprintf(stderr, "linear_memory: --shard: %s\n", trn_error_reason()); ok = 0; }
        }
        else { fprintf(stderr, "linear_memory: unknown flag '%s' (see --help)\n", a); ok = 0; takes = 0; }
        if (!ok) { *exit_code = 2; return 1; }
        i += takes;
    }
    if (c->fused && c->clip_given) {
        fprintf(stderr, "linear_memory: --clip cannot be used with --fused-step: global-norm clipping needs every "
                        "gradient before the first update, and the fused step applies each block of a gradient as "
                        "soon as it exists (no full gradient is ever there to measure)\n");
        *exit_code = 2; return 1;
    }
    if (c->fused) c->clip = 0.0f;
    if (c->lr == 0.0f) c->lr = 0.04f / (float)c->width;
    if (c->block_rows == 0) c->block_rows = c->width / 64 > 0 ? c->width / 64 : 1;
    if (c->block_rows > c->width) c->block_rows = c->width;
    return 0;
}

// ===========================================================================
// >>model: three linear layers, named as PyTorch's nn.Sequential names them
// (0 = Linear, 1 = ReLU, 2 = Linear, 3 = ReLU, 4 = Linear), so the
// checkpoint loads into that nn.Sequential with load_state_dict.
// ===========================================================================
typedef struct net {
    trn_model model;
    trn_tensor *w[3], *b[3];
} net;

static void net_declare(net *n, const trn_backend *backend, int width) {
    TRY(trn_model_init(&n->model, backend));
    n->w[0] = trn_param2(&n->model, "0.weight", width, width);  // (OC,C), as nn.Linear
    n->b[0] = trn_param1(&n->model, "0.bias", width);
    n->w[1] = trn_param2(&n->model, "2.weight", width, width);
    n->b[1] = trn_param1(&n->model, "2.bias", width);
    n->w[2] = trn_param2(&n->model, "4.weight", 1, width);
    n->b[2] = trn_param1(&n->model, "4.bias", 1);
}

// PyTorch's nn.Linear default: weight and bias uniform in +-1/sqrt(fan_in)
// (kaiming_uniform with a = sqrt(5) works out to exactly that bound). A
// uniform draw is one RNG call per number, cheaper than trn_init_normal's
// Box-Muller (log, sqrt, cos). Each chunk of 64K numbers has its own
// splitmix stream, so threads can fill chunks in any order and the values
// do not depend on the thread count. Host memory only (see net_to_device).
static void init_uniform(trn_tensor *t, float bound, uint64_t seed) {
    const size_t chunk = (size_t)1 << 16;
    long long c, n_chunks = (long long)((t->size + chunk - 1) / chunk);
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (c = 0; c < n_chunks; c++) {
        trn_rng r;
        size_t i, lo = (size_t)c * chunk, hi = lo + chunk < t->size ? lo + chunk : t->size;
        trn_rng_seed(&r, seed * 0x9E3779B97F4A7C15ull + (uint64_t)c);
        for (i = lo; i < hi; i++) t->data[i] = bound * (2.0f * trn_rng_uniform(&r) - 1.0f);
    }
}

static void net_init(net *n, uint64_t seed) {
    int l;
    for (l = 0; l < 3; l++) {
        float bound = 1.0f / sqrtf((float)n->w[l]->shape[1]);
        init_uniform(n->w[l], bound, seed * 16 + 2 * (uint64_t)l);
        init_uniform(n->b[l], bound, seed * 16 + 2 * (uint64_t)l + 1);
    }
}

// model.to(device): a second model with the same parameter table in the
// device backend's memory, one upload of the flat buffer, then the host
// copy is freed. With the CPU backend the host IS the device: nothing moves.
static void net_to_device(net *n, const trn_backend *device) {
    net d;
    if (device == n->model.backend) return;
    net_declare(&d, device, n->w[0]->shape[1]);
    TRY(trn_model_alloc(&d.model));
    trn_write_params(&d.model, 0, n->model.param_data, n->model.n_floats);
    trn_model_free(&n->model);
    *n = d; // the tensor headers are d's own (trn_param allocates each one)
}

// x (B,W) -> relu(x W0^T + b0) -> relu(. W2^T + b2) -> . W4^T + b4 = pred (B,1)
static trn_tensor *net_forward(net *n, const float *x_host, int batch) {
    int shape[2];
    trn_tensor *x, *h;
    shape[0] = batch; shape[1] = n->w[0]->shape[1];
    x = trn_input(&n->model, "x", 2, shape, x_host);
    trn_unit(&n->model, n->w[0]); // each layer is a block ("0", "2", "4"): FSDP gathers it here
    h = trn_relu(&n->model, trn_linear(&n->model, x, n->w[0], n->b[0]));
    trn_unit(&n->model, n->w[1]);
    h = trn_relu(&n->model, trn_linear(&n->model, h, n->w[1], n->b[1]));
    trn_unit(&n->model, n->w[2]);
    return trn_linear(&n->model, h, n->w[2], n->b[2]);
}

// a fixed synthetic regression batch: x uniform in [-1,1), y a smooth
// function of three of the inputs
static void make_batch(float *x, float *y, int batch, int width, uint64_t seed) {
    trn_rng r;
    int i, j;
    trn_rng_seed(&r, seed ^ 0xDA7Aull);
    for (i = 0; i < batch; i++) {
        float *row = x + (size_t)i * width;
        for (j = 0; j < width; j++) row[j] = 2.0f * trn_rng_uniform(&r) - 1.0f;
        y[i] = 0.5f * row[0] * row[1] + 0.3f * sinf(3.0f * row[2]);
    }
}

// ===========================================================================
// >>ddp: the data-parallel wrapper (train_nccl.h), world size 1
//
// trn_ddp_init is the process group (torch.distributed.init_process_group):
// it reads the launcher's environment (none here: one rank) and picks the
// communicator; with one rank that is "self", where every collective is a
// no-op. trn_ddp_attach is DistributedDataParallel(model): rank 0's weights
// to every rank, and a table of buckets. A bucket is a VIEW, a range
// [lo,hi) of the one flat gradient buffer (whole parameters, at most 25 MiB
// unless one parameter is larger, cut from the last parameter back, the
// order in which backward finishes them), so setting DDP up allocates no
// gradient memory at all: the all-reduce works in place.
// PyTorch's DDP, by default (gradient_as_bucket_view=False), allocates its
// buckets as storage of their own and copies every gradient into them: a
// second full copy of the gradients.
// ===========================================================================
static void ddp_describe(const trn_ddp *d, char *buf, size_t n) {
    int b;
    size_t used = (size_t)snprintf(buf, n, "communicator '%s', world size %d, %d buckets (views [lo,hi) of the "
                                           "flat gradient buffer, no copies):", d->comm.name, d->world, d->n_buckets);
    for (b = 0; b < d->n_buckets && used < n; b++)
        used += (size_t)snprintf(buf + used, n - used, " [%zu,%zu) %.1f MB", d->buckets[b].lo, d->buckets[b].hi,
                                 (double)(d->buckets[b].hi - d->buckets[b].lo) * 4 / 1e6);
}

// ===========================================================================
// >>fused: AdamW inside backward, one block of gradient rows at a time
//
// This is trn_backward with one change: a linear layer's weight gradient is
// never materialized whole. For out = x W^T + b (x (N,C), W (OC,C)):
//   1. dx += dout @ W           the input gradient, with the OLD W
//   2. for each block of R rows r0..r0+R of W:
//        dW[rows] = dout[:,rows]^T @ x      (R,C)   into the block buffer
//        db[rows] = sum over n of dout[n,rows]
//        AdamW on W[rows], b[rows] with their slices of m and v, at once
//      and the block buffer is reused for the next rows.
// Layers come last to first (the tape in reverse), so step 1 of the layer
// below still sees its own, not yet updated, weight. The gradient block
// counts as TRN_KIND_GRADS: it is all the gradient memory there is.
// With several ranks each block would be averaged over them (one
// all-reduce of the block, like a DDP bucket) before it is applied; with
// one rank the communicator's all-reduce returns at once.
// The columns dout[:,rows] are gathered into a small contiguous (N,R)
// buffer so that the block product is the backend's own matmul_backward:
// the same lines run on the CPU and on CUDA.
// ===========================================================================
typedef struct fused {
    int rows;               // R
    float *dw, *db, *dout;  // (R,C), (R), (N,R): the block buffers
    size_t bytes;
} fused;

static void fused_init(fused *f, trn_model *m, int rows, int width, int batch) {
    const trn_backend *bk = m->backend;
    f->rows = rows;
    f->bytes = ((size_t)rows * width + rows + (size_t)batch * rows) * sizeof(float);
    f->dw = (float *)bk->alloc((size_t)rows * width * sizeof(float), TRN_KIND_GRADS);
    f->db = (float *)bk->alloc((size_t)rows * sizeof(float), TRN_KIND_GRADS);
    f->dout = (float *)bk->alloc((size_t)batch * rows * sizeof(float), TRN_KIND_GRADS);
    if (!f->dw || !f->db || !f->dout) { fprintf(stderr, "linear_memory: %s\n", trn_error_reason()); exit(1); }
}

static void fused_free(fused *f, trn_model *m) {
    m->backend->free(f->dw); m->backend->free(f->db); m->backend->free(f->dout);
    f->dw = f->db = f->dout = NULL;
}

// an activation's gradient in the arena, zeroed, on first use (the kit's own
// ops use a block that frees each one after its producer's backward; these
// few are small, so this walk keeps them to the end of the step)
static float *act_grad(trn_model *m, trn_tensor *t) {
    if (!t->grad) {
        t->grad = (float *)trn_arena_alloc(m, t->size * sizeof(float));
        m->backend->zero(t->grad, t->size * sizeof(float));
    }
    return t->grad;
}

static void fused_linear(trn_model *m, trn_tape_entry *e, fused *f, trn_ddp *ddp, trn_adamw *opt, float lr,
                         float bc1, float bc2) {
    const trn_backend *bk = m->backend;
    const trn_adamw_desc *d = &opt->desc;
    trn_tensor *x = e->in[0], *w = e->in[1], *b = e->in[2];
    int N = e->iarg[0], C = e->iarg[1], OC = e->iarg[2], r0, n;
    const float *dout = e->out->grad; // (N,OC)
    // 1. the input gradient needs the weight as it was in forward: first
    if (x->requires_grad) bk->matmul_backward(act_grad(m, x), NULL, NULL, dout, x->data, w->data, N, C, OC);
    // 2. the weight gradient, R rows at a time, each block applied at once
    for (r0 = 0; r0 < OC; r0 += f->rows) {
        int R = OC - r0 < f->rows ? OC - r0 : f->rows;
        for (n = 0; n < N; n++) // dout[:, r0:r0+R] -> (N,R)
            bk->copy(f->dout + (size_t)n * R, dout + (size_t)n * OC + r0, (size_t)R * sizeof(float));
        bk->zero(f->dw, (size_t)R * C * sizeof(float)); // matmul_backward accumulates
        bk->zero(f->db, (size_t)R * sizeof(float));
        bk->matmul_backward(NULL, f->dw, b ? f->db : NULL, f->dout, x->data, w->data, N, C, R);
        TRY(ddp->comm.all_reduce(&ddp->comm, f->dw, (size_t)R * C, 1)); // average over ranks
        if (b) TRY(ddp->comm.all_reduce(&ddp->comm, f->db, (size_t)R, 1));
        TRY(ddp->comm.wait(&ddp->comm));
        bk->adamw_update(w->data + (size_t)r0 * C, f->dw, opt->m + w->offset + (size_t)r0 * C,
                         opt->v + w->offset + (size_t)r0 * C, (size_t)R * C, lr, d->beta1, d->beta2, d->eps,
                         w->decay ? d->weight_decay : 0.0f, bc1, bc2);
        if (b)
            bk->adamw_update(b->data + r0, f->db, opt->m + b->offset + r0, opt->v + b->offset + r0, (size_t)R,
                             lr, d->beta1, d->beta2, d->eps, b->decay ? d->weight_decay : 0.0f, bc1, bc2);
    }
}

// backward + AdamW step in one walk of the tape
static void fused_backward_step(trn_model *m, trn_tensor *loss, fused *f, trn_ddp *ddp, trn_adamw *opt, float lr) {
    const trn_backend *bk = m->backend;
    float one = 1.0f, bc1, bc2;
    int i;
    if (!opt->m) { // the moments appear on the first step, as in trn_adamw_step
        size_t bytes = m->n_floats * sizeof(float);
        opt->backend = bk; opt->lo = 0; opt->hi = m->n_floats;
        opt->m = (float *)bk->alloc(bytes, TRN_KIND_OPTIM);
        opt->v = (float *)bk->alloc(bytes, TRN_KIND_OPTIM);
        if (!opt->m || !opt->v) { fprintf(stderr, "linear_memory: AdamW moments: %s\n", trn_error_reason()); exit(1); }
        bk->zero(opt->m, bytes);
        bk->zero(opt->v, bytes);
    }
    opt->step++;
    bc1 = (float)(1.0 - pow((double)opt->desc.beta1, (double)opt->step));
    bc2 = (float)(1.0 - pow((double)opt->desc.beta2, (double)opt->step));
    bk->upload(act_grad(m, loss), &one, sizeof one); // d(loss)/d(loss) = 1
    for (i = m->tape_len - 1; i >= 0; i--) {
        trn_tape_entry *e = &m->tape[i];
        if (!e->out->grad) continue;
        if (!strcmp(e->op, "linear")) fused_linear(m, e, f, ddp, opt, lr, bc1, bc2);
        else e->backward(m, e); // relu, mse: activation gradients only
    }
    m->tape_len = 0;
}

// ===========================================================================
// >>ledger: one snapshot per phase, printed in GiB and GB
// ===========================================================================
typedef struct phase_rec {
    int done;
    trn_ledger_snapshot s;
    double seconds;   // how long the line took
} phase_rec;

static phase_rec phases[PH_COUNT];
static trn_ledger_snapshot last_snap;
static int have_last;

static size_t kit_total(const trn_ledger_snapshot *s, trn_place p) {
    size_t t = 0;
    int k;
    for (k = 0; k < TRN_KIND_COUNT; k++) t += s->current[p][k];
    return t;
}

static int has_device(const trn_ledger_snapshot *s) {
    int k;
    for (k = 0; k < TRN_KIND_COUNT; k++) if (s->peak[TRN_DEVICE][k]) return 1;
    return s->device_total != 0;
}

static void print_bytes(size_t b) { printf(" %10.4f %10.4f", (double)b / GIB, (double)b / GB); }

static void record(int ph, double seconds, const char *what) {
    phase_rec *r = &phases[ph];
    int k, dev;
    trn_ledger_read(&r->s);
    r->done = 1;
    r->seconds = seconds;
    dev = has_device(&r->s);
    printf("\n[%d/%d] %s  (%.2f s)  %s\n", ph + 1, PH_COUNT, phase_name[ph], seconds, what);
    printf("  %-14s %10s %10s", "kind", "host GiB", "host GB");
    if (dev) printf(" %10s %10s", "dev GiB", "dev GB");
    printf("\n");
    for (k = 0; k < TRN_KIND_COUNT; k++) {
        if (!r->s.current[TRN_HOST][k] && !r->s.current[TRN_DEVICE][k]) continue;
        printf("  %-14s", trn_kind_name((trn_kind)k));
        print_bytes(r->s.current[TRN_HOST][k]);
        if (dev) print_bytes(r->s.current[TRN_DEVICE][k]);
        printf("\n");
    }
    printf("  %-14s", "total (kit)");
    print_bytes(kit_total(&r->s, TRN_HOST));
    if (dev) print_bytes(kit_total(&r->s, TRN_DEVICE));
    printf("\n  %-14s", "OS: RSS");
    print_bytes(r->s.rss);
    printf("   (peak %.4f GiB = %.4f GB)\n", (double)r->s.peak_rss / GIB, (double)r->s.peak_rss / GB);
    if (dev && r->s.device_total)
        printf("  %-14s %10.4f %10.4f   of %.2f GiB (cudaMemGetInfo)\n", "driver: used", (double)r->s.device_used / GIB,
               (double)r->s.device_used / GB, (double)r->s.device_total / GIB);
    if (have_last) trn_ledger_print_diff("  change:", &last_snap, &r->s);
    last_snap = r->s;
    have_last = 1;
}

// ===========================================================================
// >>chart: memory by kind per phase, a stacked bar chart in SVG
// ===========================================================================
static const char *kind_color(int k) { // a palette of 10, whatever the number of kinds
    static const char *palette[10] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                                      "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};
    return palette[k % 10];
}

static double nice_step(double range) { // 1, 2 or 5 times a power of ten, ~6 ticks
    double raw = range / 6.0, p = pow(10.0, floor(log10(raw))), f = raw / p;
    return (f <= 1.0 ? 1.0 : f <= 2.0 ? 2.0 : f <= 5.0 ? 5.0 : 10.0) * p;
}

static trn_result write_chart(const char *path, const config *c, trn_place place, int show_seed) {
    const double W = 900, H = 520, left = 70, right = 200, top = 50, bottom = 80;
    const double pw = W - left - right, ph = H - top - bottom, slot = pw / PH_COUNT, bw = slot * 0.62;
    double ymax = 0, step, y;
    int i, k;
    FILE *f = fopen(path, "w");
    if (!f) return trn_fail(TRN_ERR_IO, "open %s: %s", path, strerror(errno));
    for (i = 0; i < PH_COUNT; i++) {
        double t = (double)kit_total(&phases[i].s, place) / GB, rss = (double)phases[i].s.rss / GB;
        if (place == TRN_DEVICE) rss = (double)phases[i].s.device_used / GB;
        if (t > ymax) ymax = t;
        if (rss > ymax) ymax = rss;
        if (show_seed && !isnan(seed_gib[i]) && seed_gib[i] * GIB / GB > ymax) ymax = seed_gib[i] * GIB / GB;
    }
    if (ymax <= 0) ymax = 1;
    step = nice_step(ymax * 1.05);
    ymax = ceil(ymax * 1.05 / step) * step;
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
               "font-family=\"sans-serif\" font-size=\"12\">\n", W, H);
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    fprintf(f, "<text x=\"%.0f\" y=\"24\" font-size=\"15\">Memory by kind after each line of the step: "
               "width %d, %s, %s (GB = 10^9 bytes)</text>\n", left, c->width,
            c->fused ? "--fused-step" : "standard step", place == TRN_DEVICE ? "device" : "CPU");
    for (y = 0; y <= ymax + 1e-9; y += step) { // grid and y labels
        double py = top + ph - y / ymax * ph;
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", left, py, left + pw, py);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n", left - 6, py + 4, y);
    }
    fprintf(f, "<text x=\"18\" y=\"%.1f\" transform=\"rotate(-90 18 %.1f)\" text-anchor=\"middle\">GB</text>\n",
            top + ph / 2, top + ph / 2);
    for (i = 0; i < PH_COUNT; i++) {
        double x = left + i * slot + (slot - bw) / 2, base = 0, rss;
        for (k = 0; k < TRN_KIND_COUNT; k++) {
            double v = (double)phases[i].s.current[place][k] / GB, y0, y1;
            if (v <= 0) continue;
            y0 = top + ph - base / ymax * ph;
            y1 = top + ph - (base + v) / ymax * ph;
            fprintf(f, "<rect x=\"%.1f\" y=\"%.2f\" width=\"%.1f\" height=\"%.2f\" fill=\"%s\">"
                       "<title>%s: %s %.4f GB</title></rect>\n",
                    x, y1, bw, y0 - y1, kind_color(k), phase_name[i], trn_kind_name((trn_kind)k), v);
            base += v;
        }
        rss = place == TRN_DEVICE ? (double)phases[i].s.device_used / GB : (double)phases[i].s.rss / GB;
        y = top + ph - rss / ymax * ph;
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\" stroke-width=\"2\">"
                   "<title>%s: %.4f GB</title></line>\n", x - 4, y, x + bw + 4, y,
                place == TRN_DEVICE ? "cudaMemGetInfo used" : "RSS", rss);
        if (show_seed && !isnan(seed_gib[i])) {
            double sy = top + ph - seed_gib[i] * GIB / GB / ymax * ph, sx = x + bw / 2;
            fprintf(f, "<path d=\"M %.1f %.1f l 6 6 l -6 6 l -6 -6 z\" fill=\"#d62728\" transform=\"translate(0 -6)\">"
                       "<title>Lightning: %.2f GiB = %.2f GB</title></path>\n", sx, sy, seed_gib[i], seed_gib[i] * GIB / GB);
        }
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" transform=\"rotate(-35 %.1f %.1f)\">%s</text>\n",
                x + bw / 2, top + ph + 16, x + bw / 2, top + ph + 16, phase_short[i]);
    }
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/>\n", left, top + ph, left + pw, top + ph);
    for (k = 0, y = top + 10; k < TRN_KIND_COUNT; k++) { // legend
        fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"12\" height=\"12\" fill=\"%s\"/>"
                   "<text x=\"%.1f\" y=\"%.1f\">%s</text>\n", left + pw + 20, y, kind_color(k), left + pw + 38, y + 10,
                trn_kind_name((trn_kind)k));
        y += 18;
    }
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\" stroke-width=\"2\"/>"
               "<text x=\"%.1f\" y=\"%.1f\">%s</text>\n", left + pw + 20, y + 6, left + pw + 32, y + 6,
            left + pw + 38, y + 10, place == TRN_DEVICE ? "driver: used" : "OS: RSS");
    y += 18;
    if (show_seed)
        fprintf(f, "<path d=\"M %.1f %.1f l 6 6 l -6 6 l -6 -6 z\" fill=\"#d62728\"/>"
                   "<text x=\"%.1f\" y=\"%.1f\">Lightning (seed)</text>\n", left + pw + 26, y, left + pw + 38, y + 10);
    fprintf(f, "</svg>\n");
    if (fclose(f) != 0) return trn_fail(TRN_ERR_IO, "write %s: %s", path, strerror(errno));
    return TRN_OK;
}

// ===========================================================================
// >>report: the table beside Lightning, one sentence per phase
// ===========================================================================
// pgb, pgib: this run's parameter bytes; LP: the seed's model (width 20000)
#define LP (800060001.0 * 4.0 / GIB)
static void why(int ph, const config *c, char *buf, size_t n, double pgb, double pgib, double block_mb) {
    switch (ph) {
    case PH_CREATED:
        snprintf(buf, n, "Both build the %.2f GB (%.2f GiB) of fp32 weights in host RAM first; the seed's GPU log "
                         "only starts when the model moves.", pgb, pgib);
        break;
    case PH_DEVICE:
#ifdef TRN_USE_CUDA
        snprintf(buf, n, "The flat weight buffer moved to the device (%.2f GiB counted); Lightning's 3.85 GiB is "
                         "%.2f GiB of weights plus %.2f GiB that is not weights, most likely the CUDA context.", pgib,
                 LP, 3.85 - LP);
#else
        snprintf(buf, n, "On the CPU the host is the device, so nothing moves (+0); Lightning's 3.85 GiB is %.2f GiB "
                         "of weights plus %.2f GiB that is not weights, most likely the CUDA context.", LP, 3.85 - LP);
#endif
        break;
    case PH_DDP:
        snprintf(buf, n, "Our buckets are views into the flat gradient buffer (a table of offsets, +0 gradient bytes); "
                         "PyTorch's DDP (gradient_as_bucket_view=False) allocates a second copy of every gradient "
                         "(%.2f GiB) plus another parameter-sized block the caching allocator keeps until "
                         "resume_end's empty_cache (6.84 GiB after it).", LP);
        break;
    case PH_FORWARD:
        snprintf(buf, n, "%d rows of %d floats are %.2f MB per layer output, so activations are tiny in both; the "
                         "seed's +0.04 GiB (forward and loss together) is the batch, activations and workspace.",
                 c->batch, c->width, (double)c->batch * c->width * 4 / 1e6);
        break;
    case PH_LOSS:
        snprintf(buf, n, "An MSE over %d numbers, a few bytes in the arena; Lightning computes it inside "
                         "training_step, logged in the row above.", c->batch);
        break;
    case PH_BACKWARD:
        if (c->fused)
            snprintf(buf, n, "Fused: no gradient buffer; each weight gradient is produced %d rows at a time into one "
                             "%.1f MB block that AdamW applies at once, so only m and v (first step) appear; "
                             "Lightning adds the full %.2f GiB of .grad tensors.", c->block_rows, block_mb, LP);
        else
            snprintf(buf, n, "The flat gradient buffer appears on the first backward (+%.2f GB = %.2f GiB) in both; "
                             "the gap to Lightning is what it already held (DDP's copy, the context).", pgb, pgib);
        break;
    case PH_CLIP:
        if (c->fused)
            snprintf(buf, n, "Skipped: global-norm clipping needs every gradient before the first update, and in "
                             "the fused step no full gradient ever exists.");
        else
            snprintf(buf, n, "trn_clip_grad_norm is a sum of squares and a scale in place over the flat buffer "
                             "(+0); Lightning does not clip by default (gradient_clip_val=None), so no figure.");
        break;
    case PH_STEP1:
        if (c->fused)
            snprintf(buf, n, "Done inside backward (row above), where m and v (%.2f GiB) appeared; Lightning's 18.79 "
                             "GiB also holds the gradients, DDP's copy of them and a parameter-sized AdamW temporary.",
                     2 * pgib);
        else
            snprintf(buf, n, "m and v appear (+%.2f GB = %.2f GiB) and the update is one in-place loop; Lightning's "
                             "18.79 GiB is 9.85 + %.2f for m and v + %.2f GiB more, a parameter-sized temporary "
                             "of the default foreach AdamW kept by the caching allocator.", 2 * pgb, 2 * pgib,
                     2 * LP, 18.79 - 9.85 - 2 * LP);
        break;
    case PH_STEP2:
        snprintf(buf, n, "Steady state: the second step allocates nothing (the arena is reused, moments kept); "
                         "the seed does not log it, PyTorch's reserved pool stays at its first-step peak.");
        break;
    default:
        if (c->async_ckpt)
            snprintf(buf, n, "--async-ckpt: training waits only while weights, m and v are copied into a host "
                             "staging buffer (+%.2f GB, the ledger's \"staging\" line); a background thread writes "
                             "the %.2f GB file while the program goes on. The seed does not log a checkpoint.",
                     3 * pgb, 3 * pgb);
        else
            snprintf(buf, n, "trn_checkpoint_save streams weights, m and v (%.2f GB on disk) through one staging "
                             "buffer of at most 4 MiB, atomically; the seed does not log a checkpoint.", 3 * pgb);
        break;
    }
}

static void print_table(const config *c, trn_place place, size_t param_bytes, size_t block_bytes) {
    double pgb = (double)param_bytes / GB, pgib = (double)param_bytes / GIB;
    int i;
    char sentence[600];
    printf("\n== Beside PyTorch Lightning (seed: Trainer(devices=1, strategy=\"ddp\"), same model, GPU, GiB) ==\n");
    if (c->width != 20000)
        printf("   (this run has --width %d: the Lightning column and its arithmetic are for width 20000)\n", c->width);
    printf("  %-18s %12s %12s %12s  %s\n", "phase", "Lightning", "kit GiB", place == TRN_DEVICE ? "driver GiB" : "RSS GiB",
           "why they differ");
    for (i = 0; i < PH_COUNT; i++) {
        char seed[16];
        double os = place == TRN_DEVICE ? (double)phases[i].s.device_used : (double)phases[i].s.rss;
        if (isnan(seed_gib[i])) snprintf(seed, sizeof seed, "-");
        else snprintf(seed, sizeof seed, "%.2f", seed_gib[i]);
        why(i, c, sentence, sizeof sentence, pgb, pgib, (double)block_bytes / 1e6);
        printf("  %-18s %12s %12.4f %12.4f  %s\n", phase_name[i], seed,
               (double)kit_total(&phases[i].s, place) / GIB, os / GIB, sentence);
    }
}

// ===========================================================================
// >>main
// ===========================================================================
// a weighted sum of every parameter: two runs that agree on it (and on the
// loss) took the same steps. Several ranks: each adds up its shard (FSDP
// has no other), the sums are added over the ranks.
static double param_checksum(trn_model *m, trn_ddp *ddp) {
    const size_t chunk = (size_t)1 << 16;
    float *buf = (float *)trn_alloc(chunk * sizeof(float), TRN_KIND_TEMP);
    double sum = 0.0;
    size_t lo, i, from = ddp->world > 1 ? ddp->shard_lo : 0, to = ddp->world > 1 ? ddp->shard_hi : m->n_floats;
    if (!buf) { fprintf(stderr, "linear_memory: %s\n", trn_error_reason()); exit(1); }
    for (lo = from; lo < to; lo += chunk) {
        size_t n = to - lo < chunk ? to - lo : chunk;
        trn_read_params(m, lo, buf, n);
        for (i = 0; i < n; i++) sum += (double)buf[i] * (double)(1 + (lo + i) % 7);
    }
    trn_free(buf);
    if (ddp->world > 1) TRY(trn_ddp_allreduce_host(ddp, &sum, 1, 0));
    return sum;
}

// A checkpoint of the state after `step`: synchronous (DIR/linear_memory.safetensors,
// rank 0 writes), or with --async-ckpt DIR/ckpt_<step>.safetensors written by a
// background thread (the newest kept). Returns the seconds training waited.
static double save_checkpoint(const config *c, trn_ddp *ddp, trn_model *m, trn_adamw *opt, trn_ckpt_async *ack,
                              int step, char *path, size_t cap) {
    trn_meta meta;
    char v[64];
    double t = now_s();
    memset(&meta, 0, sizeof meta);
    snprintf(v, sizeof v, "%d", c->width);
    trn_meta_set(&meta, "width", v);
    trn_meta_set(&meta, "mode", c->fused ? "fused" : "standard");
    if (c->async_ckpt) {
        ack->keep = 1;
#ifdef TRN_USE_CUDA
        ack->host_alloc = trn_cuda_host_alloc; // pinned: the device-to-host copy at full speed
        ack->host_free = trn_cuda_host_free;
#endif
        TRY(trn_checkpoint_save_async(ack, c->out, step, m, opt, &meta));
        snprintf(path, cap, "%s", ack->path);
    } else if (ddp->desc.shard == TRN_SHARD_FSDP) { // no rank has the whole weights: each writes its slice
        snprintf(path, cap, "%s/linear_memory.shards", c->out);
        TRY(trn_ddp_checkpoint_save_sharded(ddp, path, m, opt, &meta));
    } else {
        snprintf(path, cap, "%s/linear_memory%s.safetensors", c->out, c->fused ? "_fused" : "");
        TRY(trn_ddp_checkpoint_save(ddp, path, m, opt, &meta)); // rank 0 writes (ZeRO: every rank)
    }
    return now_s() - t;
}

// ===========================================================================
// >>ranks: what each rank keeps, predicted and measured
//
// With W ranks, P parameter bytes and S = this rank's shard (P/W):
//   none   weights P, grads P, m+v 2P                         = 4P
//   zero1  weights P, grads P, m+v 2S                         = 2P + 2S
//   zero2  weights P, grads S + staging (at most the two largest buckets
//          at once: each lives from its first write in backward to its
//          reduce-scatter), m+v 2S                            = P + 3S + 2 buckets
//   fsdp   weights S + gathered blocks (the one computing and the one
//          prefetched: the two largest), grads S + one block's staging,
//          m+v 2S                                             = 4S + 3 blocks
// plus what every mode has: activations, the batch, comm buffers, tables
// (the ledger's other kinds, measured). Every rank prints nothing else, so
// rank 0 collects each rank's figures (one all-reduce per rank).
// ===========================================================================
static trn_result print_ranks(const config *c, trn_ddp *ddp, trn_model *m) {
    trn_ledger_snapshot s;
    trn_place pl = m->backend->place;
    size_t P = m->n_floats * sizeof(float), S = (ddp->shard_hi - ddp->shard_lo) * sizeof(float), b1 = 0, b2 = 0, other = 0;
    double pred, mine[4], x[4], worst_rss = 0.0, worst_pred = 0.0;
    int b, r, k;
    trn_result rc;
    for (b = 0; b < ddp->n_buckets; b++) { // the two largest buckets (FSDP: units = the layers)
        size_t bb = (ddp->buckets[b].hi - ddp->buckets[b].lo) * sizeof(float);
        if (bb > b1) { b2 = b1; b1 = bb; } else if (bb > b2) b2 = bb;
    }
    trn_ledger_read(&s);
    for (k = 0; k < TRN_KIND_COUNT; k++)
        if (k != TRN_KIND_WEIGHTS && k != TRN_KIND_GRADS && k != TRN_KIND_OPTIM) other += s.peak[pl][k];
    switch (ddp->desc.shard) {
    case TRN_SHARD_NONE: pred = 4.0 * P; break;
    case TRN_SHARD_ZERO1: pred = 2.0 * P + 2.0 * S; break;
    case TRN_SHARD_ZERO2: pred = P + 3.0 * S + b1 + b2; break;
    default: pred = 4.0 * S + 2.0 * b1 + b2; break; // two gathered, one staged (b1 >= b2)
    }
    mine[0] = pred + (double)other;
    mine[1] = (double)s.peak_total[pl];
    mine[2] = (double)(pl == TRN_DEVICE ? s.device_used : s.peak_rss);
    mine[3] = (double)other;
    if ((rc = trn_ddp_print_memory(ddp, "\n== Every rank: the ledger now (MiB) ==")) != TRN_OK) return rc;
    printf("\n== Every rank: %s with %d ranks, predicted vs measured (GB) ==\n", trn_shard_name(ddp->desc.shard), ddp->world);
    printf("  one process (above): 4 P = %.3f GB of state\n", 4.0 * (double)P / GB);
    printf("  %-6s %12s %12s %12s %14s\n", "rank", "predicted", "kit peak", pl == TRN_DEVICE ? "driver" : "peak RSS",
           "(other kinds)");
    for (r = 0; r < ddp->world; r++) {
        for (k = 0; k < 4; k++) x[k] = r == ddp->rank ? mine[k] : 0.0;
        if ((rc = trn_ddp_allreduce_host(ddp, x, 4, 0)) != TRN_OK) return rc;
        printf("  %-6d %12.3f %12.3f %12.3f %14.3f\n", r, x[0] / GB, x[1] / GB, x[2] / GB, x[3] / GB);
        if (x[2] > worst_rss) worst_rss = x[2];
        if (x[0] > worst_pred) worst_pred = x[0];
    }
    printf("shard %s\nranks %d\nmax_rank_predicted_bytes %.0f\nmax_rank_peak_rss_bytes %.0f\n", trn_shard_name(ddp->desc.shard),
           ddp->world, worst_pred, worst_rss);
    (void)c;
    return TRN_OK;
}

int main(int argc, char **argv) {
    trn_omp_wait_passive(argv); // OpenMP threads sleep when idle (unless OMP_WAIT_POLICY is set)
    config c;
    net n;
    trn_ddp ddp;
    trn_ddp_desc dd;
    fused f;
    trn_adamw opt;
    trn_adamw_desc od;
    trn_tensor *pred, *loss;
    trn_place place;
    const trn_backend *device;
    float *x_host, *y_host, loss_val[3] = {0, 0, 0};
    size_t param_bytes, start_rss;
    double t_start, t, ckpt_seconds = 0, ckpt_total = 0, end_wait = 0;
    trn_ckpt_async ack;
    char path[1200], what[1200];
    int code, step, k;

    if (parse_args(argc, argv, &c, &code)) return code;
    if (c.threads > 0) trn_set_threads(c.threads);
    if (trn_mkdirs(c.out) != TRN_OK) {
        fprintf(stderr, "linear_memory: cannot create --out directory '%s': %s\n", c.out, trn_error_reason());
        return 2;
    }
    // the process group, as Lightning's setup_environment does first (on
    // CUDA this also picks the GPU and creates the context)
    memset(&dd, 0, sizeof dd);
    dd.shard = c.shard;
    if (trn_ddp_init(&ddp, &dd) != TRN_OK) {
        fprintf(stderr, "linear_memory: %s\n", trn_error_reason());
        return 2;
    }
    if (ddp.world != 1 && c.fused) {
        fprintf(stderr, "linear_memory: --fused-step is a one-rank lesson (started as rank %d of %d)\n", ddp.rank, ddp.world);
        trn_ddp_free(&ddp);
        return 2;
    }
    // several ranks: rank 0 tells the story, the others only train
    if (ddp.rank != 0 && !freopen("/dev/null", "w", stdout)) return 1;
#ifdef TRN_USE_CUDA
    if (trn_cuda_init(ddp.local_rank) != TRN_OK) { // trn_ddp_init's GPU (a no-op if it did)
        fprintf(stderr, "linear_memory: %s\n", trn_error_reason());
        trn_ddp_free(&ddp);
        return 2;
    }
    device = trn_cuda_backend();
#else
    device = trn_cpu_backend();
#endif
    place = device->place;
    start_rss = trn_os_rss();
    t_start = now_s();
    printf("linear_memory: Linear(%d,%d) -> ReLU -> Linear(%d,%d) -> ReLU -> Linear(%d,1), batch %d, %s step, "
           "lr %g, backend %s, %d threads\n", c.width, c.width, c.width, c.width, c.width, c.batch,
           c.fused ? "fused" : "standard", (double)c.lr, device->name, trn_get_threads());

    // 1. model created: the parameter table, one flat buffer, PyTorch's init
    t = now_s();
    net_declare(&n, NULL, c.width);   // in host memory, like nn.Module(...)
    TRY(trn_model_alloc(&n.model));
    net_init(&n, c.seed);
    param_bytes = n.model.n_floats * sizeof(float);
    snprintf(what, sizeof what, "%zu parameters = %zu bytes (%.4f GiB = %.4f GB)", n.model.n_floats, param_bytes,
             (double)param_bytes / GIB, (double)param_bytes / GB);
    record(PH_CREATED, now_s() - t, what);

    // 2. on the device
    t = now_s();
    net_to_device(&n, device);
    record(PH_DEVICE, now_s() - t, place == TRN_HOST ? "CPU backend: the weights already live where they train"
                                                     : "flat weight buffer uploaded, host copy freed");

    // 3. DDP set up, world size 1
    t = now_s();
    TRY(trn_ddp_attach(&ddp, &n.model));
    ddp_describe(&ddp, what, sizeof what);
    record(PH_DDP, now_s() - t, what);

    x_host = (float *)trn_alloc((size_t)c.batch * c.width * sizeof(float), TRN_KIND_TEMP); // the batch, host side
    y_host = (float *)trn_alloc((size_t)c.batch * sizeof(float), TRN_KIND_TEMP);
    if (!x_host || !y_host) { fprintf(stderr, "linear_memory: %s\n", trn_error_reason()); return 1; }
    make_batch(x_host, y_host, c.batch, c.width, c.seed + 1000003u * (uint64_t)ddp.rank); // each rank its own rows
    od.lr = c.lr; od.beta1 = 0; od.beta2 = 0; od.eps = 0; od.weight_decay = 0.01f; od.no_weight_decay = 0;
    trn_adamw_init(&opt, &od);
    memset(&f, 0, sizeof f);
    memset(&ack, 0, sizeof ack);

    for (step = 1; step <= c.steps; step++) {
        double ts = now_s();
        int first = step == 1;
        // the step, line by line (the first step is recorded phase by phase)
        trn_zero_grad(&n.model); // (no gradient buffer yet on step 1: nothing to do)
        trn_reset(&n.model);
        t = now_s();
        pred = net_forward(&n, x_host, c.batch);
        if (first) record(PH_FORWARD, now_s() - t, "three linear layers, two ReLUs: activations in the arena");
        t = now_s();
        loss = trn_mse(&n.model, pred, y_host);
        loss_val[step == 1 ? 0 : step == 2 ? 1 : 2] = trn_item(&n.model, loss);
        if (first) {
            snprintf(what, sizeof what, "loss %.6f", (double)trn_item(&n.model, loss));
            record(PH_LOSS, now_s() - t, what);
        }
        t = now_s();
        if (c.fused) {
            if (!f.dw) fused_init(&f, &n.model, c.block_rows, c.width, c.batch);
            fused_backward_step(&n.model, loss, &f, &ddp, &opt, c.lr);
            if (first) {
                snprintf(what, sizeof what, "fused with AdamW step 1: blocks of %d rows (%.2f MB), m and v appear",
                         c.block_rows, (double)f.bytes / 1e6);
                record(PH_BACKWARD, now_s() - t, what);
                record(PH_CLIP, 0.0, "skipped: global-norm clipping is impossible in the fused step");
                record(PH_STEP1, 0.0, "(done inside backward)");
            }
        } else {
            trn_backward(&n.model, loss);
            TRY(trn_ddp_allreduce_grads(&ddp, &n.model)); // one rank: the average is the gradient
            if (first) record(PH_BACKWARD, now_s() - t, "the gradient buffer appears on the first backward");
            t = now_s();
            if (c.clip > 0.0f) {
                float norm = 0.0f;
                TRY(trn_ddp_clip_grad_norm(&ddp, &n.model, c.clip, &norm));
                snprintf(what, sizeof what, "global norm %.4g, clipped to %g", (double)norm, (double)c.clip);
            } else {
                snprintf(what, sizeof what, "off (--clip 0)");
            }
            if (first) record(PH_CLIP, now_s() - t, what);
            t = now_s();
            TRY(trn_ddp_adamw_step(&ddp, &opt, &n.model, c.lr));
            if (first) record(PH_STEP1, now_s() - t, "AdamW: m and v appear on the first step");
        }
        if (step == 2) {
            snprintf(what, sizeof what, "the whole second step; loss %.6f", (double)loss_val[1]);
            record(PH_STEP2, now_s() - ts, what);
        } else if (step > 2) {
            printf("  step %d: loss %.6f (%.2f s, eta %.0f s)\n", step, (double)loss_val[2], now_s() - ts,
                   (now_s() - ts) * (c.steps - step));
        }
        if (c.ckpt_every > 0 && step % c.ckpt_every == 0 && step < c.steps) { // the last one is phase 10
            double w = save_checkpoint(&c, &ddp, &n.model, &opt, &ack, step, path, sizeof path);
            ckpt_total += w;
            printf("  checkpoint after step %d: %s (training waited %.2f s)\n", step, path, w);
        }
    }

    // 10. checkpoint saved: weights + m + v + step, safetensors, atomic
    if (c.no_save) {
        snprintf(path, sizeof path, "skipped (--no-save)");
        record(PH_CKPT, 0.0, path);
    } else {
        ckpt_seconds = save_checkpoint(&c, &ddp, &n.model, &opt, &ack, c.steps, path, sizeof path);
        ckpt_total += ckpt_seconds;
        if (c.async_ckpt) {
            snprintf(what, sizeof what, "%.900s: staged in %.2f s (%.2f s of it waiting for the previous save), "
                     "written by a background thread", path, ckpt_seconds, ack.wait_seconds);
            record(PH_CKPT, ckpt_seconds, what);
        } else {
            record(PH_CKPT, ckpt_seconds, path);
        }
    }

    // after training: the loss on the batch with the final weights (no tape)
    trn_reset(&n.model);
    n.model.grad_enabled = 0;
    {
        float final_loss = trn_item(&n.model, trn_mse(&n.model, net_forward(&n, x_host, c.batch), y_host));
        double checksum = param_checksum(&n.model, &ddp);
        trn_ledger_snapshot s;
        size_t block_bytes = c.fused ? f.bytes : 0;
        double total_s;
        t = now_s();
        TRY(trn_checkpoint_wait(&ack)); // --async-ckpt: the file must be complete before we report
        end_wait = now_s() - t;
        total_s = now_s() - t_start;
        n.model.grad_enabled = 1;
        trn_ledger_read(&s);

        print_table(&c, place, param_bytes, block_bytes);
        if (ddp.world > 1) TRY(print_ranks(&c, &ddp, &n.model));
        printf("\n== Peaks ==\n");
        for (k = 0; k < TRN_KIND_COUNT; k++)
            if (s.peak[place][k]) printf("  %-14s %10.4f GiB %10.4f GB\n", trn_kind_name((trn_kind)k),
                                          (double)s.peak[place][k] / GIB, (double)s.peak[place][k] / GB);
        printf("  %-14s %10.4f GiB %10.4f GB   (%s%s: %.3fx parameter bytes)\n", "kit total", (double)s.peak_total[place] / GIB,
               (double)s.peak_total[place] / GB, c.fused ? "3 P + one block" : "4 P",
               c.async_ckpt ? " + 3 P staging expected" : " expected", (double)s.peak_total[place] / (double)param_bytes);
        printf("  %-14s %10.4f GiB %10.4f GB\n", "OS: peak RSS", (double)s.peak_rss / GIB, (double)s.peak_rss / GB);
        if (c.width == 20000 && place == TRN_HOST) {
            double target = (c.fused ? 10.0e9 : 13.0e9) + (c.async_ckpt ? 3.0 * (double)param_bytes : 0.0);
            printf("  target: peak RSS %.3f GB <= %.1f GB: %s\n", (double)s.peak_rss / GB, target / GB,
                   (double)s.peak_rss <= target ? "PASS" : "FAIL");
        }

        snprintf(path, sizeof path, "%s/linear_memory%s.svg", c.out, c.fused ? "_fused" : "");
        TRY(write_chart(path, &c, place, c.width == 20000));
        printf("  chart: %s\n", path);

        // for scripts (tests/test_linear_memory.sh)
        printf("\nmode %s\n", c.fused ? "fused" : "standard");
        printf("width %d\nbatch %d\nsteps %d\n", c.width, c.batch, c.steps);
        printf("param_count %zu\nparam_bytes %zu\nblock_bytes %zu\n", n.model.n_floats, param_bytes, block_bytes);
        printf("peak_kit_bytes %zu\n", s.peak_total[place]);
        for (k = 0; k < TRN_KIND_COUNT; k++) { // "kv cache" -> peak_kv_cache_bytes: one word per key
            char key[64], *sp;
            snprintf(key, sizeof key, "%s", trn_kind_name((trn_kind)k));
            while ((sp = strchr(key, ' ')) != NULL) *sp = '_';
            printf("peak_%s_bytes %zu\n", key, s.peak[place][k]);
        }
        printf("start_rss_bytes %zu\npeak_rss_bytes %zu\n", start_rss, s.peak_rss);
        printf("loss_step1 %.9g\nloss_step2 %.9g\nloss_final %.9g\nparam_checksum %.9e\n", (double)loss_val[0],
               (double)loss_val[1], (double)final_loss, checksum);
        printf("checkpoint_seconds %.2f\nwall_seconds %.2f\n", ckpt_seconds, total_s);
        // every checkpoint: what training waited; the last one's write (async: in the background)
        printf("checkpoint_wait_total_seconds %.2f\n", ckpt_total);
        printf("checkpoint_write_seconds %.2f\ncheckpoint_end_wait_seconds %.2f\n",
               c.async_ckpt ? ack.write_seconds : ckpt_seconds, end_wait);
    }

    trn_ckpt_async_free(&ack);
    trn_free(x_host);
    trn_free(y_host);
    trn_ddp_free(&ddp);
    if (f.dw) fused_free(&f, &n.model);
    trn_adamw_free(&opt);
    trn_model_free(&n.model);
    return 0;
}
