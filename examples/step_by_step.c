/* step_by_step.c - the training step, one line at a time, with the memory
   each line adds; then the same step done by hand, without the tape.

   A two-layer MLP (x -> linear -> gelu -> linear -> mse) learns y = sin(x)
   summed over features. Part 1 runs the textbook loop and, for the first
   two steps, prints what each line did to the ledger. Part 2 calls the
   forward and backward functions directly - exactly what the tape does -
   and checks that the gradients agree bit for bit.

   Run:   ./examples/step_by_step [--steps N] [--hidden H] [--threads N]
*/
#define TRAIN_IMPLEMENTATION
#include "train.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- model */
typedef struct mlp {
    trn_model m;                    /* parameters, arena, tape            */
    trn_tensor *w1, *b1, *w2, *b2;  /* (H,D) (H) (1,H) (1)               */
} mlp;

static void mlp_create(mlp *n, int D, int H, uint64_t seed) {
    trn_rng rng;
    trn_model_init(&n->m, NULL);
    n->w1 = trn_param2(&n->m, "w1", H, D);
    n->b1 = trn_param1(&n->m, "b1", H);
    n->w2 = trn_param2(&n->m, "w2", 1, H);
    n->b2 = trn_param1(&n->m, "b2", 1);
    if (trn_model_alloc(&n->m) != TRN_OK) {
        fprintf(stderr, "step_by_step: %s\n", trn_error_reason());
        exit(2);
    }
    trn_rng_seed(&rng, seed);
    trn_init_normal(&n->m, n->w1, 0.0f, 1.0f / sqrtf((float)D), &rng);
    trn_init_normal(&n->m, n->w2, 0.0f, 1.0f / sqrtf((float)H), &rng);
}

/* x (B,D) -> loss = mean((mlp(x) - y)^2) */
static trn_tensor *mlp_forward(mlp *n, const float *x, const float *y, int B, int D) {
    int shape[2];
    trn_tensor *in, *h;
    shape[0] = B; shape[1] = D;
    in = trn_input(&n->m, "x", 2, shape, x);            /* (B,D)            */
    h = trn_gelu(&n->m, trn_linear(&n->m, in, n->w1, n->b1)); /* (B,H)      */
    return trn_mse(&n->m, trn_linear(&n->m, h, n->w2, n->b2), y); /* scalar */
}

static void make_batch(trn_rng *r, float *x, float *y, int B, int D) {
    int b, d;
    for (b = 0; b < B; b++) {
        float s = 0.0f;
        for (d = 0; d < D; d++) { x[b * D + d] = 4.0f * trn_rng_uniform(r) - 2.0f; s += sinf(x[b * D + d]); }
        y[b] = s / (float)D;
    }
}

/* ------------------------------------------------ part 2: without a tape */
/* The same step by hand: the forward kernels, then the backward kernels in
   reverse order. The chain rule starts with dloss = 1; mse's backward
   turns it into dpred = 2 (pred - y) / B; each linear's backward produces
   the gradient of its input, weight and bias. */
static double by_hand_max_diff(mlp *n, const float *x, const float *y, int B, int D, int H) {
    float *h1 = (float *)malloc(sizeof(float) * B * H), *a1 = (float *)malloc(sizeof(float) * B * H);
    float *pred = (float *)malloc(sizeof(float) * B), *losses = (float *)malloc(sizeof(float) * B);
    float *dpred = (float *)calloc(B, sizeof(float)), *da1 = (float *)calloc((size_t)B * H, sizeof(float));
    float *dh1 = (float *)calloc((size_t)B * H, sizeof(float));
    float *g = (float *)calloc(n->m.n_floats, sizeof(float)); /* our own flat grads */
    float *gw1 = g + n->w1->offset, *gb1 = g + n->b1->offset, *gw2 = g + n->w2->offset, *gb2 = g + n->b2->offset;
    double diff = 0.0;
    size_t i;
    /* forward: save h1 (gelu's input) and a1 (the second linear's input) */
    trn_linear_forward(h1, x, n->w1->data, n->b1->data, B, D, H);   /* (B,H) */
    trn_gelu_forward(a1, h1, (size_t)B * H);                         /* (B,H) */
    trn_linear_forward(pred, a1, n->w2->data, n->b2->data, B, H, 1); /* (B,1) */
    trn_mse_forward(losses, pred, y, (size_t)B);
    /* backward, last op first */
    trn_mse_backward(dpred, pred, y, 1.0f / (float)B, (size_t)B);
    trn_linear_backward(da1, gw2, gb2, dpred, a1, n->w2->data, B, H, 1);
    trn_gelu_backward(dh1, h1, da1, (size_t)B * H);
    trn_linear_backward(NULL, gw1, gb1, dh1, x, n->w1->data, B, D, H); /* x needs no grad */
    for (i = 0; i < n->m.n_floats; i++) diff = fmax(diff, fabs((double)g[i] - n->m.grad_data[i]));
    free(h1); free(a1); free(pred); free(losses); free(dpred); free(da1); free(dh1); free(g);
    return diff;
}

/* ------------------------------------------------------------------ main */
int main(int argc, char **argv) {
    trn_omp_wait_passive(argv); // OpenMP threads sleep when idle (unless OMP_WAIT_POLICY is set)
    int steps = 300;      /* optimizer steps                              */
    int B = 64;           /* batch size                                   */
    int D = 8;            /* input features                               */
    int H = 64;           /* hidden units                                 */
    int threads = 2;
    float lr = 3e-3f;
    mlp n;
    trn_adamw opt;
    trn_rng data_rng;
    float *x, *y, loss_value = 0.0f;
    int i, s;

    for (i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: %s [--steps N] [--hidden H] [--threads N]\n", argv[0]);
            return 0;
        } else if (i + 1 < argc && !strcmp(argv[i], "--steps")) steps = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--hidden")) H = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--threads")) threads = atoi(argv[++i]);
        else { fprintf(stderr, "step_by_step: unknown or incomplete flag '%s' (see --help)\n", argv[i]); return 2; }
    }
    if (steps < 2 || H < 1 || H > 1 << 16) { fprintf(stderr, "step_by_step: need --steps >= 2 and 1 <= --hidden <= 65536\n"); return 2; }
    trn_set_threads(threads);
    x = (float *)malloc(sizeof(float) * B * D);
    y = (float *)malloc(sizeof(float) * B);
    trn_rng_seed(&data_rng, 1);

    printf("== part 1: the loop, and what each line does to memory ==\n");
    {
        trn_ledger_snapshot before, after;
        /* 20 steps of warmup, then a cosine from lr to lr/10 */
        const trn_schedule sched = {TRN_SCHEDULE_COSINE, 20, steps, lr, lr / 10, 0};
        trn_ledger_read(&before);
        mlp_create(&n, D, H, 42);
        trn_ledger_read(&after);
        trn_ledger_print_diff("model created", &before, &after);
        trn_adamw_init(&opt, NULL);
        for (s = 0; s < steps; s++) {
            trn_tensor *loss;
            int show = s < 2;
            float lr_now = trn_schedule_lr(&sched, s);
            make_batch(&data_rng, x, y, B, D);
            if (show) printf(" step %d\n", s + 1);
#define LINE(what, stmt) do { trn_ledger_read(&before); stmt; trn_ledger_read(&after); \
                              if (show) trn_ledger_print_diff(what, &before, &after); } while (0)
            LINE("trn_zero_grad", trn_zero_grad(&n.m));
            LINE("trn_reset", trn_reset(&n.m));
            LINE("forward (loss)", loss = mlp_forward(&n, x, y, B, D));
            loss_value = trn_item(&n.m, loss);
            LINE("trn_backward", trn_backward(&n.m, loss));
            LINE("trn_clip_grad_norm", trn_clip_grad_norm(&n.m, 1.0f));
            LINE("trn_adamw_step", trn_adamw_step(&opt, &n.m, lr_now));
#undef LINE
            if (s % 50 == 0 || s == steps - 1) printf(" step %4d  loss %.5f\n", s + 1, loss_value);
        }
        trn_ledger_print("after training");
    }

    printf("\n== part 2: the same forward and backward, by hand ==\n");
    {
        trn_tensor *loss;
        double diff;
        make_batch(&data_rng, x, y, B, D);
        trn_zero_grad(&n.m);
        trn_reset(&n.m);
        loss = mlp_forward(&n, x, y, B, D);
        trn_backward(&n.m, loss);
        diff = by_hand_max_diff(&n, x, y, B, D, H);
        printf(" largest difference between tape and hand-written gradients: %g\n", diff);
        printf(" final_loss %.6f\n", loss_value);
        if (diff != 0.0) { fprintf(stderr, "step_by_step: tape and hand gradients differ\n"); return 1; }
    }
    trn_adamw_free(&opt);
    trn_model_free(&n.m);
    free(x); free(y);
    return 0;
}
