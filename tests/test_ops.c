/* test_ops.c - every op's backward against central finite differences.

   For each op we build a tiny graph  out = op(inputs...)  and the scalar
   L = mean((out - r)^2) with a fixed random r (the kit's mse op), run
   trn_backward, and compare each analytic gradient with
       (L(x + h) - L(x - h)) / 2h
   where L is recomputed in double from the op's float output, so the only
   float error is the op's own. Inputs are parameters so every one of them
   gets a gradient. Tolerances are per op (ops with exp/tanh are looser). */
#define TRN__XENT_CHUNK_FLOATS 20 /* linear_cross_entropy: 2 rows of Vp=9 per chunk */
#define TRAIN_IMPLEMENTATION
#include "train.h"
#include "check.h"

#include <stdlib.h>

typedef trn_tensor *(*build_fn)(trn_model *m, trn_tensor **p);

static trn_model M;
static trn_tensor *P[5];
static int NP;
static float *R;        /* target of the probe loss */
static size_t R_N;

static int IDS[64], TGT[64];

static double probe_loss(build_fn f) {
    trn_tensor *out;
    double L = 0.0;
    size_t i;
    int saved = M.grad_enabled;
    M.grad_enabled = 0;
    trn_reset(&M);
    out = f(&M, P);
    for (i = 0; i < out->size; i++) {
        double d = (double)out->data[i] - R[i % R_N];
        L += d * d;
    }
    M.grad_enabled = saved;
    return L / (double)out->size;
}

/* one op: declare params with shapes, init, check every gradient */
static void gradcheck(const char *name, build_fn f, int np, const int shapes[][4], const int *ndims,
                      double h, double atol, double rtol, float lo, float hi) {
    trn_rng rng;
    trn_tensor *out, *loss;
    int i, k, bad = 0;
    double worst = 0.0, biggest = 0.0;
    char pname[32];
    trn_model_init(&M, NULL);
    for (i = 0; i < np; i++) {
        snprintf(pname, sizeof pname, "p%d", i);
        P[i] = trn_param(&M, pname, ndims[i], shapes[i]);
    }
    NP = np;
    CHECK(trn_model_alloc(&M) == TRN_OK, "%s: alloc\n", name);
    trn_rng_seed(&rng, 1234);
    for (i = 0; i < np; i++) {
        size_t j;
        for (j = 0; j < P[i]->size; j++) {
            float u = lo + (hi - lo) * trn_rng_uniform(&rng);
            /* keep |x| away from 0 (ReLU's kink) by pushing small values out */
            if (lo < 0 && fabsf(u) < 0.05f) u = u < 0 ? -0.05f - u : 0.05f + u;
            P[i]->data[j] = u;
        }
    }
    trn_reset(&M);
    out = f(&M, P);
    R_N = out->size;
    R = (float *)malloc(sizeof(float) * R_N);
    for (i = 0; i < (int)R_N; i++) R[i] = trn_rng_normal(&rng);
    loss = trn_mse(&M, out, R);
    trn_zero_grad(&M);
    trn_backward(&M, loss);
    for (k = 0; k < np; k++) {
        trn_tensor *t = P[k];
        size_t j, step = t->size > 40 ? t->size / 40 : 1;
        for (j = 0; j < t->size; j += step) {
            float x0 = t->data[j];
            double Lp, Lm, fd, an = t->grad[j], err;
            t->data[j] = x0 + (float)h; Lp = probe_loss(f);
            t->data[j] = x0 - (float)h; Lm = probe_loss(f);
            t->data[j] = x0;
            fd = (Lp - Lm) / (2.0 * h);
            if (fabs(an) > biggest) biggest = fabs(an);
            err = fabs(fd - an) / (atol + rtol * fabs(fd));
            if (err > worst) worst = err;
            if (err > 1.0 && bad++ < 3)
                printf("  %s: p%d[%zu]: analytic %.6g, finite difference %.6g\n", name, k, j, an, fd);
        }
    }
    CHECK(bad == 0, "%s: %d gradients off (worst %.2f of tolerance)\n", name, bad, worst);
    CHECK(biggest > 1e-3, "%s: all gradients ~0 (largest %g): the check would prove nothing\n", name, biggest);
    printf("ok - %-26s worst error %.3f of tolerance, largest gradient %.3g\n", name, worst, biggest);
    free(R);
    trn_model_free(&M);
}

/* the graphs */
static trn_tensor *g_linear(trn_model *m, trn_tensor **p) { return trn_linear(m, p[0], p[1], p[2]); }
static trn_tensor *g_linear_nobias(trn_model *m, trn_tensor **p) { return trn_linear(m, p[0], p[1], NULL); }
static trn_tensor *g_embedding(trn_model *m, trn_tensor **p) { return trn_embedding(m, p[0], IDS, 2, 5); }
static trn_tensor *g_layernorm(trn_model *m, trn_tensor **p) { return trn_layernorm(m, p[0], p[1], p[2]); }
static trn_tensor *g_gelu(trn_model *m, trn_tensor **p) { return trn_gelu(m, p[0]); }
static trn_tensor *g_relu(trn_model *m, trn_tensor **p) { return trn_relu(m, p[0]); }
static trn_tensor *g_add(trn_model *m, trn_tensor **p) { return trn_add(m, p[0], p[1]); }
static trn_tensor *g_attn_causal(trn_model *m, trn_tensor **p) { return trn_attention(m, p[0], 2, 1); }
static trn_tensor *g_attn_full(trn_model *m, trn_tensor **p) { return trn_attention(m, p[0], 3, 0); }
/* grouped-query: 4 query heads on 2 kv heads, and 4 on 1 */
static trn_tensor *g_attn_gqa2(trn_model *m, trn_tensor **p) { return trn_attention_gqa(m, p[0], 4, 2, 1); }
static trn_tensor *g_attn_gqa4(trn_model *m, trn_tensor **p) { return trn_attention_gqa(m, p[0], 4, 1, 0); }
static trn_tensor *g_meanpool(trn_model *m, trn_tensor **p) { return trn_mean_pool(m, p[0]); }
/* cross-entropy is itself a scalar; the probe loss then is (L - r)^2 */
static trn_tensor *g_xent(trn_model *m, trn_tensor **p) { return trn_cross_entropy(m, p[0], TGT, 7); }
/* the fused classifier: x (2,5,4) -> 10 rows in chunks of 2, W (9,4), b (9);
   x (2,1,8): 2 rows, the op keeps dlogits (2,9) instead of dW (9,8) */
static trn_tensor *g_linear_xent(trn_model *m, trn_tensor **p) { return trn_linear_cross_entropy(m, p[0], p[1], p[2], TGT, 7); }
static trn_tensor *g_linear_xent_nobias(trn_model *m, trn_tensor **p) { return trn_linear_cross_entropy(m, p[0], p[1], NULL, TGT, 7); }
static trn_tensor *g_mse(trn_model *m, trn_tensor **p) {
    static float target[12] = {0.3f, -1.2f, 0.8f, 0.0f, 2.0f, -0.5f, 0.1f, 0.9f, -0.7f, 1.5f, -2.0f, 0.25f};
    return trn_mse(m, p[0], target);
}
/* GPT-2's feed-forward as one op: x (2,3,4), fc (6,4)+(6), proj (5,6)+(5) */
static trn_tensor *g_mlp(trn_model *m, trn_tensor **p) { return trn_mlp(m, p[0], p[1], p[2], p[3], p[4]); }
static trn_tensor *g_mlp_nobias(trn_model *m, trn_tensor **p) { return trn_mlp(m, p[0], p[1], NULL, p[2], NULL); }

/* trn_mlp is the three ops it replaces, to the bit: the output and the
   five gradients. Runs: 0 the three ops, 1 trn_mlp (the CPU's
   trn_matmul_dgelu_backward), 2 trn_mlp on a table without it (the plain
   kernels into a scratch, what a backend without the entry gets) */
static void mlp_equals_three_ops(void) {
    const int shapes[5][3] = {{2, 3, 4}, {6, 4}, {6}, {5, 6}, {5}}, nd[5] = {3, 2, 1, 2, 1};
    float *got[3][6], target[30];
    int run, k, same = 1;
    size_t j, n[6];
    trn_rng rng;
    trn_backend plain = *trn_cpu_backend();
    plain.matmul_dgelu_backward = NULL;
    for (run = 0; run < 3; run++) {
        trn_tensor *out;
        trn_model_init(&M, run == 2 ? &plain : NULL);
        for (k = 0; k < 5; k++) {
            char name[16];
            snprintf(name, sizeof name, "p%d", k);
            P[k] = trn_param(&M, name, nd[k], shapes[k]);
        }
        CHECK(trn_model_alloc(&M) == TRN_OK, "mlp: alloc\n");
        trn_rng_seed(&rng, 99);
        for (k = 0; k < 5; k++) trn_init_normal(&M, P[k], 0.0f, 1.0f, &rng);
        for (k = 0; k < 30; k++) target[k] = trn_rng_normal(&rng);
        trn_reset(&M);
        out = run ? trn_mlp(&M, P[0], P[1], P[2], P[3], P[4])
                  : trn_linear(&M, trn_gelu(&M, trn_linear(&M, P[0], P[1], P[2])), P[3], P[4]);
        trn_zero_grad(&M);
        trn_backward(&M, trn_mse(&M, out, target));
        for (k = 0; k < 6; k++) { /* 0..4: the gradients, 5: the output */
            n[k] = k < 5 ? P[k]->size : out->size;
            got[run][k] = (float *)malloc(sizeof(float) * n[k]);
            memcpy(got[run][k], k < 5 ? P[k]->grad : out->data, sizeof(float) * n[k]);
        }
        trn_model_free(&M);
    }
    for (k = 0; k < 6; k++) {
        for (run = 1; run < 3; run++) same &= memcmp(got[0][k], got[run][k], sizeof(float) * n[k]) == 0;
        for (j = 0; j < n[k] && got[0][k][j] == 0.0f; j++) {}
        CHECK(j < n[k], "mlp: %s %d is all zeros: the comparison would prove nothing\n", k < 5 ? "gradient" : "output", k);
        for (run = 0; run < 3; run++) free(got[run][k]);
    }
    CHECK(same, "trn_mlp differs from trn_linear + trn_gelu + trn_linear\n");
    printf("ok - trn_mlp = linear, gelu, linear (fused backward and plain): output and 5 gradients bit-identical\n");
}

/* a whole pre-LN transformer block, to check the ops compose */
static trn_tensor *g_block(trn_model *m, trn_tensor **p) {
    trn_tensor *x = p[0], *w = p[1], *ln = p[2], *wo = p[3];
    trn_tensor *h = trn_layernorm(m, x, ln, ln);
    trn_tensor *qkv = trn_linear(m, h, w, NULL);
    trn_tensor *a = trn_attention(m, qkv, 2, 1);
    return trn_add(m, x, trn_gelu(m, trn_linear(m, a, wo, NULL)));
}

/* the same block as a recompute region (its input is a parameter here) */
static trn_tensor *block_region(trn_model *m, trn_tensor *x, void *user) {
    trn_tensor **p = (trn_tensor **)user, *q[4];
    q[0] = x; q[1] = p[1]; q[2] = p[2]; q[3] = p[3];
    return g_block(m, q);
}
static trn_tensor *g_block_recompute(trn_model *m, trn_tensor **p) { return trn_recompute(m, block_region, p, p[0]); }

int main(void) {
    int i;
    trn_set_threads(2);
    for (i = 0; i < 64; i++) { IDS[i] = (i * 7 + 3) % 6; TGT[i] = (i * 5 + 1) % 7; }
    {
        const int s[3][4] = {{2, 3, 5}, {4, 5}, {4}}; const int d[3] = {3, 2, 1};
        gradcheck("linear", g_linear, 3, s, d, 1e-2, 1e-4, 1e-3, -1, 1);
        gradcheck("linear (no bias)", g_linear_nobias, 2, s, d, 1e-2, 1e-4, 1e-3, -1, 1);
    }
    { const int s[1][4] = {{6, 4}}; const int d[1] = {2};
      gradcheck("embedding", g_embedding, 1, s, d, 1e-2, 1e-4, 1e-3, -1, 1); }
    { const int s[3][4] = {{3, 8}, {8}, {8}}; const int d[3] = {2, 1, 1};
      gradcheck("layernorm", g_layernorm, 3, s, d, 1e-2, 1e-3, 5e-3, -2, 2); }
    { const int s[1][4] = {{5, 7}}; const int d[1] = {2};
      gradcheck("gelu", g_gelu, 1, s, d, 1e-2, 1e-4, 2e-3, -3, 3);
      gradcheck("relu", g_relu, 1, s, d, 1e-2, 1e-4, 1e-3, -1, 1); }
    { const int s[2][4] = {{2, 3, 4}, {2, 3, 4}}; const int d[2] = {3, 3};
      gradcheck("add", g_add, 2, s, d, 1e-2, 1e-4, 1e-3, -1, 1); }
    { const int s[1][4] = {{2, 5, 3 * 4}}; const int d[1] = {3};
      gradcheck("attention (causal)", g_attn_causal, 1, s, d, 1e-2, 1e-3, 5e-3, -1, 1); }
    { const int s[1][4] = {{2, 4, 3 * 6}}; const int d[1] = {3};
      gradcheck("attention (full)", g_attn_full, 1, s, d, 1e-2, 1e-3, 5e-3, -1, 1); }
    { const int s[1][4] = {{2, 6, (4 + 2 * 2) * 3}}; const int d[1] = {3};
      gradcheck("attention gqa 4/2 (causal)", g_attn_gqa2, 1, s, d, 1e-2, 1e-3, 5e-3, -1, 1); }
    { const int s[1][4] = {{2, 5, (4 + 2 * 1) * 2}}; const int d[1] = {3};
      gradcheck("attention gqa 4/1 (full)", g_attn_gqa4, 1, s, d, 1e-2, 1e-3, 5e-3, -1, 1); }
    { const int s[1][4] = {{2, 3, 5}}; const int d[1] = {3};
      gradcheck("mean_pool", g_meanpool, 1, s, d, 1e-2, 1e-4, 1e-3, -1, 1); }
    { const int s[1][4] = {{2, 3, 9}}; const int d[1] = {3};   /* Vp=9, V=7: padded */
      gradcheck("cross_entropy (padded)", g_xent, 1, s, d, 1e-2, 1e-3, 5e-3, -2, 2); }
    { const int s[3][4] = {{2, 5, 4}, {9, 4}, {9}}; const int d[3] = {3, 2, 1}; /* Vp=9, V=7 */
      gradcheck("linear_cross_entropy", g_linear_xent, 3, s, d, 1e-2, 1e-3, 5e-3, -1, 1);
      gradcheck("linear_cross_entropy (no b)", g_linear_xent_nobias, 2, s, d, 1e-2, 1e-3, 5e-3, -1, 1); }
    { const int s[3][4] = {{2, 1, 8}, {9, 8}, {9}}; const int d[3] = {3, 2, 1}; /* 2 rows: keeps dlogits */
      gradcheck("linear_cross_entropy (few)", g_linear_xent, 3, s, d, 1e-2, 1e-3, 5e-3, -1, 1); }
    { const int s[1][4] = {{3, 4}}; const int d[1] = {2};
      gradcheck("mse", g_mse, 1, s, d, 1e-2, 1e-4, 1e-3, -1, 1); }
    { const int s[4][4] = {{2, 4, 6}, {18, 6}, {6}, {6, 6}}; const int d[4] = {3, 2, 1, 2};
      gradcheck("transformer block", g_block, 4, s, d, 1e-2, 2e-3, 1e-2, -1, 1);
      gradcheck("block in trn_recompute", g_block_recompute, 4, s, d, 1e-2, 2e-3, 1e-2, -1, 1); }
    { const int s[5][4] = {{2, 3, 4}, {6, 4}, {6}, {5, 6}, {5}}; const int d[5] = {3, 2, 1, 2, 1};
      gradcheck("mlp", g_mlp, 5, s, d, 1e-2, 1e-3, 5e-3, -1, 1); }
    { const int s[3][4] = {{2, 3, 4}, {6, 4}, {5, 6}}; const int d[3] = {3, 2, 2};
      gradcheck("mlp (no biases)", g_mlp_nobias, 3, s, d, 1e-2, 1e-3, 5e-3, -1, 1); }
    mlp_equals_three_ops();
    return check_summary();
}
