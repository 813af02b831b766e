/* test_ops_decoder.c - the public op API (trn_op_apply, trn_grad, trn_gradcheck)
   and the ops added for modern decoders, each checked against central
   finite differences with the public checker trn_gradcheck.

   The op API is tested the way a user meets it: an op written here, in
   this file, with public names only (a scaled square, y = s * x^2), run
   with and without the tape; and the checker is tested on a deliberately
   wrong backward, which it must reject (a checker that cannot fail proves
   nothing). */
#define TRAIN_IMPLEMENTATION
#include "train.h"
#include "check.h"

#include <stdlib.h>
#include <string.h>

/* --- a user op: y = s * x^2, s a float argument ---------------------------- */
static void sq_fw(trn_model *m, trn_tape_entry *e) {   /* saves nothing: x is an input */
    size_t i;
    for (i = 0; i < e->out->size; i++) e->out->data[i] = e->farg[0] * e->in[0]->data[i] * e->in[0]->data[i];
}
static void sq_bw(trn_model *m, trn_tape_entry *e) {   /* dx += dy * 2 s x */
    float *dx = trn_grad(m, e->in[0]), *dy = trn_grad(m, e->out);
    size_t i;
    if (dx) for (i = 0; i < e->out->size; i++) dx[i] += dy[i] * 2.0f * e->farg[0] * e->in[0]->data[i];
}
static void sq_bw_wrong(trn_model *m, trn_tape_entry *e) {   /* forgets the 2 */
    float *dx = trn_grad(m, e->in[0]), *dy = trn_grad(m, e->out);
    size_t i;
    if (dx) for (i = 0; i < e->out->size; i++) dx[i] += dy[i] * e->farg[0] * e->in[0]->data[i];
}
static const trn_op SQ = {"scaled_square", sq_fw, sq_bw, NULL, NULL, 0};
static const trn_op SQ_WRONG = {"scaled_square_wrong", sq_fw, sq_bw_wrong, NULL, NULL, 0};

static trn_tensor *scaled_square(trn_model *m, const trn_op *op, trn_tensor *x, float s) {
    trn_tensor *out = trn_tensor_new(m, "sq", x->ndim, x->shape);
    trn_op_args a;
    memset(&a, 0, sizeof a);
    a.f[0] = s;
    trn_op_apply(m, op, out, x, NULL, NULL, &a);
    return out;
}

static trn_model M;
static trn_tensor *P[4];

static trn_tensor *g_sq(trn_model *m, void *u) { return scaled_square(m, &SQ, P[0], 1.5f); }
static trn_tensor *g_sq_wrong(trn_model *m, void *u) { return scaled_square(m, &SQ_WRONG, P[0], 1.5f); }
/* the user op composed with kit ops, through to a scalar loss */
static trn_tensor *g_sq_model(trn_model *m, void *u) {
    static const float target[6] = {0.5f, -0.25f, 1.0f, 0.0f, 2.0f, -1.0f};
    return trn_mse(m, trn_linear(m, scaled_square(m, &SQ, P[0], 0.7f), P[1], P[2]), target);
}

/* a model of np parameters with random values in [lo, hi], |x| >= 0.05 */
static void model_new(int np, const int shapes[][4], const int *ndims, float lo, float hi) {
    trn_rng rng;
    char name[16];
    int i;
    size_t j;
    trn_model_init(&M, NULL);
    for (i = 0; i < np; i++) {
        snprintf(name, sizeof name, "p%d", i);
        P[i] = trn_param(&M, name, ndims[i], shapes[i]);
    }
    CHECK(trn_model_alloc(&M) == TRN_OK, "alloc\n");
    trn_rng_seed(&rng, 99);
    for (i = 0; i < np; i++)
        for (j = 0; j < P[i]->size; j++) {
            float v = lo + (hi - lo) * trn_rng_uniform(&rng);
            if (lo < 0 && fabsf(v) < 0.05f) v = v < 0 ? v - 0.05f : v + 0.05f;
            P[i]->data[j] = v;
        }
}

/* check every parameter's gradient of build() with the public checker */
static void grad_ok(const char *name, trn_tensor *(*build)(trn_model *, void *), float eps, float atol, float rtol) {
    trn_gradcheck_desc d;
    trn_gradcheck_result r;
    int bad;
    memset(&d, 0, sizeof d);
    d.eps = eps; d.atol = atol; d.rtol = rtol; d.max_per_param = 48;
    bad = trn_gradcheck(&M, build, NULL, &d, &r);
    CHECK(bad == 0, "%s: %d of %d gradients off (worst %.2f of tolerance)\n", name, bad, r.checked, r.worst);
    CHECK(r.largest > 1e-3, "%s: all gradients ~0 (largest %g): the check proves nothing\n", name, r.largest);
    printf("ok - %-26s %3d elements, worst %.3f of tolerance\n", name, r.checked, r.worst);
}

static void test_op_api(void) {
    static const int s1[][4] = {{2, 3}}, s3[][4] = {{2, 3}, {3, 3}, {3}};
    static const int n1[] = {2}, n3[] = {2, 2, 1};
    trn_gradcheck_result r;
    trn_tape_entry *e;
    trn_tensor *y;
    int bad;

    model_new(1, s1, n1, -1.0f, 1.0f);
    /* forward values and the tape entry */
    trn_reset(&M);
    y = scaled_square(&M, &SQ, P[0], 1.5f);
    CHECK_NEAR(y->data[4], 1.5 * P[0]->data[4] * P[0]->data[4], 1e-6, 1e-6, "user op forward");
    CHECK(M.tape_len == 1 && strcmp(M.tape[0].op, "scaled_square") == 0 && M.tape[0].backward == sq_bw,
          "the op is on the tape with its backward\n");
    CHECK(y->requires_grad == 1, "its output requires a gradient\n");
    /* without the tape: forward runs, nothing is recorded */
    trn_reset(&M);
    M.grad_enabled = 0;
    e = trn_op_apply(&M, &SQ, trn_tensor_new(&M, "o", 2, P[0]->shape), P[0], NULL, NULL, NULL);
    CHECK(M.tape_len == 0 && e && e->out->requires_grad == 0, "no tape: not recorded, entry still returned\n");
    M.grad_enabled = 1;
    /* trn_grad: NULL for what needs no gradient */
    trn_reset(&M);
    y = trn_tensor_new(&M, "x", 2, P[0]->shape); /* an activation no op produced: needs no gradient */
    CHECK(trn_grad(&M, y) == NULL && trn_grad(&M, NULL) == NULL, "trn_grad of an input is NULL\n");
    CHECK(trn_grad(&M, P[0]) != NULL, "trn_grad of a parameter is its gradient\n");
    grad_ok("user op (scaled square)", g_sq, 1e-2f, 1e-3f, 2e-2f);
    /* the checker catches a wrong backward */
    bad = trn_gradcheck(&M, g_sq_wrong, NULL, NULL, &r);
    CHECK(bad > 0 && r.worst > 1.0, "gradcheck accepted a backward that is off by 2x\n");
    printf("ok - gradcheck rejects a wrong backward (%d of %d elements flagged)\n", bad, r.checked);
    trn_model_free(&M);

    model_new(3, s3, n3, -1.0f, 1.0f);
    grad_ok("user op in a model (mse)", g_sq_model, 1e-2f, 1e-3f, 2e-2f);
    trn_model_free(&M);
}

/* --- the ops of modern decoders -------------------------------------------- */
static trn_tensor *g_mul(trn_model *m, void *u) { return trn_mul(m, P[0], P[1]); }
static trn_tensor *g_silu(trn_model *m, void *u) { return trn_silu(m, P[0]); }
static trn_tensor *g_sigmoid(trn_model *m, void *u) { return trn_sigmoid(m, P[0]); }
static trn_tensor *g_tanh(trn_model *m, void *u) { return trn_tanh(m, P[0]); }
static trn_tensor *g_softmax(trn_model *m, void *u) { return trn_softmax(m, P[0]); }
static trn_tensor *g_rmsnorm(trn_model *m, void *u) { return trn_rmsnorm(m, P[0], P[1], 1e-5f); }
static trn_tensor *g_rope(trn_model *m, void *u) { return trn_rope(m, P[0], 2, 1, 10000.0f, 0); }
static trn_tensor *g_rope_pos(trn_model *m, void *u) { return trn_rope(m, P[0], 4, 2, 500.0f, 37); }
/* Llama's MLP: W2 (silu(x W1) * (x W3)), through to a loss */
static trn_tensor *g_swiglu(trn_model *m, void *u) {
    static int T[6] = {1, 0, 3, 2, 2, 1};
    trn_tensor *h = trn_mul(m, trn_silu(m, trn_linear(m, P[0], P[1], NULL)), trn_linear(m, P[0], P[3], NULL));
    return trn_cross_entropy(m, trn_linear(m, trn_rmsnorm(m, h, P[2], 1e-6f), P[1], NULL), T, 4);
}

static void test_ops(void) {
    trn_tensor *y;
    size_t i;
    { /* mul, same shape */
        static const int s[][4] = {{3, 4}, {3, 4}}, n[] = {2, 2};
        model_new(2, s, n, -2.0f, 2.0f);
        trn_reset(&M);
        y = trn_mul(&M, P[0], P[1]);
        CHECK(y->data[7] == P[0]->data[7] * P[1]->data[7], "mul forward\n");
        grad_ok("mul (same shape)", g_mul, 1e-2f, 1e-3f, 2e-2f);
        trn_model_free(&M);
    }
    { /* mul, one row broadcast over (2,3) rows */
        static const int s[][4] = {{2, 3, 4}, {4}}, n[] = {3, 1};
        model_new(2, s, n, -2.0f, 2.0f);
        trn_reset(&M);
        y = trn_mul(&M, P[0], P[1]);
        CHECK(y->data[4 * 5 + 2] == P[0]->data[4 * 5 + 2] * P[1]->data[2], "mul broadcast forward\n");
        grad_ok("mul (broadcast rows)", g_mul, 1e-2f, 1e-3f, 2e-2f);
        trn_model_free(&M);
    }
    { /* elementwise nonlinearities */
        static const int s[][4] = {{3, 5}}, n[] = {2};
        model_new(1, s, n, -4.0f, 4.0f);
        trn_reset(&M);
        y = trn_silu(&M, P[0]);
        CHECK_NEAR(y->data[3], P[0]->data[3] / (1.0 + exp(-P[0]->data[3])), 1e-6, 1e-5, "silu forward");
        y = trn_sigmoid(&M, P[0]);
        CHECK_NEAR(y->data[8], 1.0 / (1.0 + exp(-P[0]->data[8])), 1e-7, 1e-5, "sigmoid forward");
        y = trn_tanh(&M, P[0]);
        CHECK_NEAR(y->data[11], tanh(P[0]->data[11]), 1e-7, 1e-5, "tanh forward");
        grad_ok("silu", g_silu, 1e-2f, 1e-3f, 2e-2f);
        grad_ok("sigmoid", g_sigmoid, 1e-2f, 1e-3f, 2e-2f);
        grad_ok("tanh", g_tanh, 1e-2f, 1e-3f, 2e-2f);
        trn_model_free(&M);
    }
    { /* softmax over the last dim */
        static const int s[][4] = {{2, 2, 7}}, n[] = {3};
        double sum = 0.0, ref;
        model_new(1, s, n, -3.0f, 3.0f);
        trn_reset(&M);
        y = trn_softmax(&M, P[0]);
        for (i = 7; i < 14; i++) sum += y->data[i];
        CHECK_NEAR(sum, 1.0, 1e-6, 0, "softmax row sums to 1");
        for (ref = 0.0, i = 7; i < 14; i++) ref += exp(P[0]->data[i] - P[0]->data[9]);
        CHECK_NEAR(y->data[9], 1.0 / ref, 1e-7, 1e-5, "softmax forward");
        grad_ok("softmax", g_softmax, 1e-2f, 1e-3f, 2e-2f);
        trn_model_free(&M);
    }
    { /* RMSNorm */
        static const int s[][4] = {{3, 8}, {8}}, n[] = {2, 1};
        double ss = 0.0;
        model_new(2, s, n, -2.0f, 2.0f);
        trn_reset(&M);
        y = trn_rmsnorm(&M, P[0], P[1], 1e-5f);
        for (i = 8; i < 16; i++) ss += (double)P[0]->data[i] * P[0]->data[i];
        CHECK_NEAR(y->data[11], P[0]->data[11] * P[1]->data[3] / sqrt(ss / 8 + 1e-5), 1e-6, 1e-5, "rmsnorm forward");
        grad_ok("rmsnorm", g_rmsnorm, 1e-2f, 1e-3f, 2e-2f);
        trn_model_free(&M);
    }
    { /* RoPE on packed qkv: (B,T,(NH+2NKV)*hs) = (2,5,(2+2)*4) */
        static const int s[][4] = {{2, 5, 16}}, n[] = {3};
        int t = 3, h, d;
        double worst = 0.0;
        model_new(1, s, n, -2.0f, 2.0f);
        trn_reset(&M);
        y = trn_rope(&M, P[0], 2, 1, 10000.0f, 0);
        /* row (b=1,t=3): heads 0,1 (q) and 2 (k) rotated by angle t*f_i, head 3 (v) as is */
        for (h = 0; h < 4; h++)
            for (d = 0; d < 4; d++) {
                size_t base = (size_t)(1 * 5 + t) * 16 + (size_t)h * 4;
                int i2 = d % 2;
                double a = t * pow(10000.0, -2.0 * i2 / 4), x1 = P[0]->data[base + i2], x2 = P[0]->data[base + i2 + 2];
                double want = h == 3 ? P[0]->data[base + d] : d < 2 ? x1 * cos(a) - x2 * sin(a) : x2 * cos(a) + x1 * sin(a);
                if (fabs(want - y->data[base + d]) > worst) worst = fabs(want - y->data[base + d]);
            }
        CHECK(worst < 1e-6, "rope forward vs the rotate-half formula: off by %g\n", worst);
        grad_ok("rope (2 q, 1 kv head)", g_rope, 1e-2f, 1e-3f, 2e-2f);
        trn_model_free(&M);
    }
    { /* RoPE, grouped heads and an offset position (as a KV cache uses it) */
        static const int s[][4] = {{1, 3, 64}}, n[] = {3};
        model_new(1, s, n, -2.0f, 2.0f);
        grad_ok("rope (4 q, 2 kv, pos0=37)", g_rope_pos, 1e-2f, 1e-3f, 2e-2f);
        trn_model_free(&M);
    }
    { /* the ops composed: a SwiGLU MLP + RMSNorm + cross-entropy */
        static const int s[][4] = {{6, 4}, {4, 4}, {4}, {4, 4}}, n[] = {2, 2, 1, 2};
        model_new(4, s, n, -1.0f, 1.0f);
        grad_ok("swiglu + rmsnorm + xent", g_swiglu, 1e-2f, 1e-3f, 3e-2f);
        trn_model_free(&M);
    }
}

int main(void) {
    test_op_api();
    test_ops();
    return check_summary();
}
