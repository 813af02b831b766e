/* test_ops2.c - the public op API (trn_op_apply, trn_grad, trn_gradcheck)
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
static const trn_op SQ = {"scaled_square", sq_fw, sq_bw, NULL, NULL};
static const trn_op SQ_WRONG = {"scaled_square_wrong", sq_fw, sq_bw_wrong, NULL, NULL};

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
    y = trn_input(&M, "x", 2, P[0]->shape, NULL);
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

int main(void) {
    test_op_api();
    return check_summary();
}
