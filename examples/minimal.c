/* minimal.c - the smallest complete training program: build with
       cc -O2 -I. -o minimal minimal.c -lm
   in the folder that holds it and train.h (in this repository: cc -O2 -I.
   -o examples/minimal examples/minimal.c -lm; add -march=native -fopenmp
   for speed). A two-layer MLP learns to tell two interleaved spirals
   apart: 2 numbers (x, y) in, 2 classes out. The loss falls from ln 2 =
   0.69 and the accuracy climbs from 50% toward 100%. */
#define TRAIN_IMPLEMENTATION
#include "train.h"
#include <math.h>

#define N 256 /* points, all in one batch */
#define H 64  /* hidden units */

int main(int argc, char **argv) {
    trn_model m;
    trn_adamw opt;
    trn_rng rng;
    trn_tensor *w1, *b1, *w2, *b2, *x, *logits, *loss;
    float xs[N * 2], out[N * 2];
    int ys[N], shape[2] = {N, 2}, i, step, right;
    (void)argc;
    trn_omp_wait_passive(argv); /* threads sleep between loops, not spin */

    /* the data: point i on spiral ys[i], a little noise */
    trn_rng_seed(&rng, 1);
    for (i = 0; i < N; i++) {
        float r = (float)(i / 2) / (N / 2), a = 3.0f * r * 3.14159265f + (float)(i % 2) * 3.14159265f;
        ys[i] = i % 2;
        xs[2 * i + 0] = r * cosf(a) + 0.02f * trn_rng_normal(&rng);
        xs[2 * i + 1] = r * sinf(a) + 0.02f * trn_rng_normal(&rng);
    }

    /* the model: parameters are declared, then allocated in one flat buffer */
    trn_model_init(&m, NULL); /* NULL: the CPU backend */
    w1 = trn_param2(&m, "fc1.weight", H, 2); /* (out, in), as torch.nn.Linear */
    b1 = trn_param1(&m, "fc1.bias", H);
    w2 = trn_param2(&m, "fc2.weight", 2, H);
    b2 = trn_param1(&m, "fc2.bias", 2);
    if (trn_model_alloc(&m) != TRN_OK) { fprintf(stderr, "minimal: %s\n", trn_error_reason()); return 1; }
    trn_init_normal(&m, w1, 0.0f, 1.0f, &rng); /* biases start at 0 */
    trn_init_normal(&m, w2, 0.0f, 0.1f, &rng);
    trn_adamw_init(&opt, NULL); /* lr 1e-3, betas 0.9/0.999, weight decay 0.01 */

    for (step = 0; step <= 500; step++) { /* the training step */
        trn_zero_grad(&m);
        trn_reset(&m);
        x = trn_input(&m, "x", 2, shape, xs);
        logits = trn_linear(&m, trn_gelu(&m, trn_linear(&m, x, w1, b1)), w2, b2);
        loss = trn_cross_entropy(&m, logits, ys, 2);
        trn_backward(&m, loss);
        trn_clip_grad_norm(&m, 1.0f);
        if (trn_adamw_step(&opt, &m, 0.02f) != TRN_OK) { fprintf(stderr, "minimal: %s\n", trn_error_reason()); return 1; }
        if (step % 100 == 0) {
            trn_read(&m, logits, out); /* the logits of this step's forward */
            for (i = 0, right = 0; i < N; i++) right += (out[2 * i + 1] > out[2 * i]) == ys[i];
            printf("step %4d  loss %.4f  accuracy %5.1f%%\n", step, trn_item(&m, loss), 100.0 * right / N);
        }
    }
    trn_adamw_free(&opt);
    trn_model_free(&m);
    return 0;
}
