/* custom_op.c - write your own op without touching train.h: Swish with a
   learnable beta, checked against finite differences, then trained.

       swish(x) = x * sigmoid(beta * x)          (Ramachandran et al. 2017)

   beta is a parameter with one value per channel, so the network learns
   how sharp each unit's gate is (beta -> 0: x/2, linear; beta large:
   ReLU). The op is written with public names only:

     1. a forward function: reads e->in[0] (x) and e->in[1] (beta), writes
        e->out; says what it saves for backward (here nothing: backward
        recomputes sigmoid(beta x) from x and beta, which stay alive);
     2. a backward function: ACCUMULATES into trn_grad(m, e->in[i]) from
        trn_grad(m, e->out);
     3. a trn_op that names them (and, in the CUDA build, CUDA kernels for
        the same op in the cuda_forward / cuda_backward slots);
     4. a wrapper that makes the output tensor and calls trn_op_apply, the
        one call that runs forward and records the op on the tape.

   Then trn_gradcheck, the public finite-difference checker, tests the
   backward (of the op alone and of the whole model), and a small MLP with
   swish learns y = mean_d sin(3 x_d) - 0.5 mean_d x_d^2.

   Run:   ./examples/custom_op [--steps N] [--hidden H] [--seed N] [--threads N]
          ./examples/custom_op_cuda      (the same file, CUDA kernels for swish)
   It exits 1 if a gradient check fails or the loss does not fall. */
#define TRAIN_IMPLEMENTATION
#include "train.h"

#ifdef TRN_USE_CUDA
#define TRAIN_CUDA_IMPLEMENTATION
#include "train_cuda.h"
#endif

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ the op (CPU)
   x (N,C), beta (C) -> y (N,C).  s = sigmoid(beta_c x):
      y    = x s
      dy/dx    = s + x s (1 - s) beta_c
      dy/dbeta = x s (1 - s) x             summed over the N rows for dbeta */
static float sigmoidf_(float z) { return 1.0f / (1.0f + expf(-z)); }

static void swish_forward(trn_model *m, trn_tape_entry *e) {
    const float *x = e->in[0]->data, *beta = e->in[1]->data;
    float *y = e->out->data;
    size_t C = e->in[1]->size, i;
    for (i = 0; i < e->out->size; i++) y[i] = x[i] * sigmoidf_(beta[i % C] * x[i]);
}

static void swish_backward(trn_model *m, trn_tape_entry *e) {
    const float *x = e->in[0]->data, *beta = e->in[1]->data;
    const float *dy = trn_grad(m, e->out);                    /* d loss / d y */
    float *dx = trn_grad(m, e->in[0]), *dbeta = trn_grad(m, e->in[1]); /* NULL: not needed */
    size_t C = e->in[1]->size, i;
    for (i = 0; i < e->out->size; i++) {
        float b = beta[i % C], s = sigmoidf_(b * x[i]), ds = s * (1.0f - s);
        if (dx) dx[i] += dy[i] * (s + x[i] * ds * b);
        if (dbeta) dbeta[i % C] += dy[i] * x[i] * ds * x[i];
    }
}

/* ------------------------------------------------- the same op in CUDA
   Compiled only by nvcc (examples/custom_op_cuda.cu includes this file with
   TRN_USE_CUDA). Pointers are device memory; the stream is the kit's. */
#ifdef TRN_USE_CUDA
__global__ void swish_fwd_k(float *y, const float *x, const float *beta, size_t n, size_t C) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] / (1.0f + expf(-beta[i % C] * x[i]));
}
/* dx: one thread per element; dbeta: one thread per channel walks the rows
   (in order, so the sum is the same bits every run) */
__global__ void swish_bwd_dx_k(float *dx, const float *dy, const float *x, const float *beta, size_t n, size_t C) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float b = beta[i % C], s = 1.0f / (1.0f + expf(-b * x[i]));
        dx[i] += dy[i] * (s + x[i] * s * (1.0f - s) * b);
    }
}
__global__ void swish_bwd_dbeta_k(float *dbeta, const float *dy, const float *x, const float *beta, size_t N, size_t C) {
    size_t c = (size_t)blockIdx.x * blockDim.x + threadIdx.x, r;
    float acc = 0.0f;
    if (c >= C) return;
    for (r = 0; r < N; r++) {
        float xv = x[r * C + c], s = 1.0f / (1.0f + expf(-beta[c] * xv));
        acc += dy[r * C + c] * xv * s * (1.0f - s) * xv;
    }
    dbeta[c] += acc;
}
static unsigned blocks_for(size_t n) { return (unsigned)((n + 255) / 256); }
static void swish_forward_cuda(trn_model *m, trn_tape_entry *e) {
    size_t n = e->out->size, C = e->in[1]->size;
    TRN_CUDA_LAUNCH(swish_fwd_k, dim3(blocks_for(n)), dim3(256), 0, (cudaStream_t)trn_cuda_stream(), e->out->data,
                    (const float *)e->in[0]->data, (const float *)e->in[1]->data, n, C);
}
static void swish_backward_cuda(trn_model *m, trn_tape_entry *e) {
    size_t n = e->out->size, C = e->in[1]->size;
    const float *dy = trn_grad(m, e->out), *x = e->in[0]->data, *beta = e->in[1]->data;
    float *dx = trn_grad(m, e->in[0]), *dbeta = trn_grad(m, e->in[1]);
    if (dx) TRN_CUDA_LAUNCH(swish_bwd_dx_k, dim3(blocks_for(n)), dim3(256), 0, (cudaStream_t)trn_cuda_stream(), dx, dy, x, beta, n, C);
    if (dbeta) TRN_CUDA_LAUNCH(swish_bwd_dbeta_k, dim3(blocks_for(C)), dim3(256), 0, (cudaStream_t)trn_cuda_stream(), dbeta, dy, x, beta, n / C, C);
}
#define SWISH_CUDA swish_forward_cuda, swish_backward_cuda
#else
#define SWISH_CUDA NULL, NULL /* this build has no CUDA: the slots stay empty */
#endif

/* the op: its name, the host pair, the device pair */
static const trn_op SWISH = {"swish", swish_forward, swish_backward, SWISH_CUDA, 0}; // 0: fp32 kernels only

/* what a model calls: y = swish(x; beta), recorded on the tape */
static trn_tensor *swish(trn_model *m, trn_tensor *x, trn_tensor *beta) {
    trn_tensor *y;
    if (beta->ndim != 1 || beta->shape[0] != x->shape[x->ndim - 1])
        trn_fatal("swish: beta must have one value per channel (%d), got %d", x->shape[x->ndim - 1], beta->shape[0]);
    y = trn_tensor_new(m, "swish", x->ndim, x->shape);
    trn_op_apply(m, &SWISH, y, x, beta, NULL, NULL);
    return y;
}

/* ------------------------------------------------------------- the model */
typedef struct net {
    trn_model m;
    trn_tensor *w1, *b1, *beta, *w2, *b2; /* (H,D) (H) (H) (1,H) (1) */
    int D, H;
} net;

static const trn_backend *backend(void) {
#ifdef TRN_USE_CUDA
    if (trn_cuda_init(0) != TRN_OK) {
        fprintf(stderr, "custom_op: %s\n", trn_error_reason());
        exit(1);
    }
    return trn_cuda_backend();
#else
    return NULL; /* the CPU */
#endif
}

static void net_create(net *n, int D, int H, uint64_t seed) {
    trn_rng rng;
    n->D = D; n->H = H;
    trn_model_init(&n->m, backend());
    n->w1 = trn_param2(&n->m, "w1", H, D);
    n->b1 = trn_param1(&n->m, "b1", H);
    n->beta = trn_param1(&n->m, "beta", H);
    n->w2 = trn_param2(&n->m, "w2", 1, H);
    n->b2 = trn_param1(&n->m, "b2", 1);
    if (trn_model_alloc(&n->m) != TRN_OK) {
        fprintf(stderr, "custom_op: %s\n", trn_error_reason());
        exit(1);
    }
    trn_rng_seed(&rng, seed);
    trn_init_normal(&n->m, n->w1, 0.0f, 1.0f / sqrtf((float)D), &rng);
    trn_init_normal(&n->m, n->b1, 0.0f, 0.5f, &rng);
    trn_init_const(&n->m, n->beta, 1.0f);  /* start as SiLU */
    trn_init_normal(&n->m, n->w2, 0.0f, 1.0f / sqrtf((float)H), &rng);
}

/* x (B,D) -> pred (B,1) */
static trn_tensor *net_forward(net *n, const float *x, int B) {
    int shape[2];
    trn_tensor *in;
    shape[0] = B; shape[1] = n->D;
    in = trn_input(&n->m, "x", 2, shape, x);
    return trn_linear(&n->m, swish(&n->m, trn_linear(&n->m, in, n->w1, n->b1), n->beta), n->w2, n->b2);
}

static void make_batch(trn_rng *r, float *x, float *y, int B, int D) {
    int b, d;
    for (b = 0; b < B; b++) {
        float s = 0.0f, q = 0.0f;
        for (d = 0; d < D; d++) {
            float v = 4.0f * trn_rng_uniform(r) - 2.0f;
            x[b * D + d] = v;
            s += sinf(3.0f * v);
            q += v * v;
        }
        y[b] = s / (float)D - 0.5f * q / (float)D;
    }
}

/* ------------------------------------------------------ gradient checks */
/* build() for trn_gradcheck: any forward on the model. The checker probes
   a random weighted sum of what it returns, so an op's raw output works as
   well as a loss. */
typedef struct check_data { net *n; const float *x, *y; int B; } check_data;

static trn_tensor *check_op_alone(trn_model *m, void *user) {
    check_data *c = (check_data *)user;
    int shape[2];
    trn_tensor *h;
    shape[0] = c->B; shape[1] = c->n->D;
    /* swish of the first layer's output: beta gets dbeta, w1 and b1 get dx */
    h = trn_linear(m, trn_input(m, "x", 2, shape, c->x), c->n->w1, c->n->b1);
    return swish(m, h, c->n->beta);
}
static trn_tensor *check_model_loss(trn_model *m, void *user) {
    check_data *c = (check_data *)user;
    return trn_mse(m, net_forward(c->n, c->x, c->B), c->y);
}

#ifndef CUSTOM_OP_NO_MAIN
static void usage(void) {
    printf("usage: custom_op [--steps N] [--hidden H] [--seed N] [--threads N]\n"
           "  checks the swish op's gradients, then trains a 1-hidden-layer MLP with it\n");
}

int main(int argc, char **argv) {
    int steps = 1500, H = 64, D = 4, B = 64, threads = 0, i, bad;
    uint64_t seed = 1;
    float lr = 2e-2f, first = 0.0f, last = 0.0f, *x, *y, beta_host[256];
    trn_rng data;
    trn_adamw opt;
    trn_adamw_desc od;
    trn_gradcheck_result res;
    check_data cd;
    net n;
    for (i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(); return 0; }
        else if (!strcmp(a, "--steps") && v) { steps = atoi(v); i++; }
        else if (!strcmp(a, "--hidden") && v) { H = atoi(v); i++; }
        else if (!strcmp(a, "--seed") && v) { seed = strtoull(v, NULL, 10); i++; }
        else if (!strcmp(a, "--threads") && v) { threads = atoi(v); i++; }
        else { fprintf(stderr, "custom_op: unknown flag or missing value: %s (try --help)\n", a); return 2; }
    }
    if (steps < 1 || H < 1 || H > 256 || threads < 0) {
        fprintf(stderr, "custom_op: need --steps >= 1, 1 <= --hidden <= 256, --threads >= 0\n");
        return 2;
    }
    trn_set_threads(threads);
    net_create(&n, D, H, seed);
    x = (float *)malloc(sizeof(float) * (size_t)B * D);
    y = (float *)malloc(sizeof(float) * (size_t)B);
    trn_rng_seed(&data, seed + 1);

    /* 1. the gradient checks: the op alone, then the whole model's loss */
    make_batch(&data, x, y, 8, D);
    cd.n = &n; cd.x = x; cd.y = y; cd.B = 8;
    bad = trn_gradcheck(&n.m, check_op_alone, &cd, NULL, &res);
    printf("gradcheck swish alone:  %3d elements, worst %.3f of tolerance -> %s\n", res.checked, res.worst,
           bad ? "FAIL" : "ok");
    bad += trn_gradcheck(&n.m, check_model_loss, &cd, NULL, &res);
    printf("gradcheck model loss:   %3d elements, worst %.3f of tolerance -> %s\n", res.checked, res.worst,
           bad ? "FAIL" : "ok");
    if (bad) return 1;

    /* 2. the training loop: the op is on the tape like any other */
    memset(&od, 0, sizeof od);
    trn_adamw_init(&opt, &od);
    const trn_schedule sched = {TRN_SCHEDULE_COSINE, steps / 20, steps, lr, lr / 10, 0}; /* warmup, cosine */
    for (i = 0; i < steps; i++) {
        trn_tensor *loss;
        make_batch(&data, x, y, B, D);
        trn_zero_grad(&n.m);
        trn_reset(&n.m);
        loss = trn_mse(&n.m, net_forward(&n, x, B), y);
        trn_backward(&n.m, loss);
        if (trn_adamw_step(&opt, &n.m, trn_schedule_lr(&sched, i)) != TRN_OK) {
            fprintf(stderr, "custom_op: %s\n", trn_error_reason());
            return 1;
        }
        last = trn_item(&n.m, loss);
        if (i == 0) first = last;
        if (i % (steps / 6 > 0 ? steps / 6 : 1) == 0 || i == steps - 1) printf("step %4d  loss %.5f\n", i, last);
    }
    trn_read(&n.m, n.beta, beta_host);
    printf("learned beta (first 8 units):");
    for (i = 0; i < 8 && i < H; i++) printf(" %.2f", beta_host[i]);
    printf("\nfinal_loss %.5f (first %.5f)\n", last, first);
    trn_adamw_free(&opt);
    trn_model_free(&n.m);
    free(x); free(y);
    return last < 0.5f * first ? 0 : 1;
}
#endif /* CUSTOM_OP_NO_MAIN */
