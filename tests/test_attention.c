/* test_attention.c - the fused (flash-style) attention against the
   materialized reference, forward and all three input gradients.

   Shapes are odd on purpose: T not a multiple of the blocks (96 query
   rows, 64 keys): 1, 7, 63, 65, 100, 129, 130, 300; head sizes 5, 16, 24,
   32, 64 (not always a multiple of the 16-float vectors); causal and not;
   grouped-query ratios NH/NKV = 1, 2, 4. Both pairs get the same qkv and the same dout; the
   gradient buffers start from the same random values, so the check also
   covers "backward accumulates (+=)". The fused lse is checked against a
   log-sum-exp computed in double. Then: the fused bits do not depend on the
   thread count, and the tape op keeps no (T,T) buffer in the arena. */
#define TRAIN_IMPLEMENTATION
#include "train.h"
#include "check.h"

#include <stdlib.h>

static trn_rng RNG;

static float *randn(size_t n, float scale) {
    float *p = (float *)malloc(sizeof(float) * (n ? n : 1));
    size_t i;
    for (i = 0; i < n; i++) p[i] = scale * trn_rng_normal(&RNG);
    return p;
}
static float *copy(const float *x, size_t n) {
    float *p = (float *)malloc(sizeof(float) * (n ? n : 1));
    memcpy(p, x, sizeof(float) * n);
    return p;
}
static double maxdiff(const float *a, const float *b, size_t n) {
    double d = 0.0;
    size_t i;
    for (i = 0; i < n; i++) {
        double e = fabs((double)a[i] - (double)b[i]);
        if (!(e <= d)) d = e; /* NaN wins */
    }
    return d;
}
/* the largest difference over one part of every position of qkv (B*T rows
   of ld floats): columns [c0, c1) */
static double maxdiff_cols(const float *a, const float *b, size_t rows, int ld, int c0, int c1) {
    double d = 0.0;
    size_t r;
    for (r = 0; r < rows; r++) {
        double e = maxdiff(a + r * ld + c0, b + r * ld + c0, (size_t)(c1 - c0));
        if (!(e <= d)) d = e;
    }
    return d;
}

static void agree(int B, int T, int NH, int NKV, int hs, int causal) {
    int ld = (NH + 2 * NKV) * hs, C = NH * hs, b, h, t, s;
    size_t nqkv = (size_t)B * T * ld, no = (size_t)B * T * C, natt = (size_t)B * NH * T * T;
    float *qkv = randn(nqkv, 1.5f), *dout = randn(no, 1.0f), *g0 = randn(nqkv, 1.0f);
    float *out_r = randn(no, 1.0f), *out_f = randn(no, 1.0f); /* garbage: must be overwritten */
    float *att = (float *)malloc(sizeof(float) * natt), *scratch = (float *)malloc(sizeof(float) * natt);
    float *lse = (float *)malloc(sizeof(float) * (size_t)B * NH * T);
    float *g_r = copy(g0, nqkv), *g_f = copy(g0, nqkv);
    double d_out, d_lse = 0.0, d_q, d_k, d_v, *sc = (double *)malloc(sizeof(double) * (size_t)T);
    char what[128];
    trn_attention_forward(out_r, att, qkv, B, T, NH, NKV, hs, causal);
    trn_flash_attention_forward(out_f, lse, qkv, B, T, NH, NKV, hs, causal);
    trn_attention_backward(g_r, scratch, dout, qkv, att, B, T, NH, NKV, hs, causal);
    trn_flash_attention_backward(g_f, dout, qkv, out_f, lse, B, T, NH, NKV, hs, causal);
    /* lse in double, straight from the definition */
    for (b = 0; b < B; b++)
        for (h = 0; h < NH; h++)
            for (t = 0; t < T; t++) {
                const float *q = qkv + ((size_t)b * T + t) * ld + (size_t)h * hs;
                int g = h / (NH / NKV), last = causal ? t : T - 1, c;
                double mx = -INFINITY, sum = 0.0, e;
                for (s = 0; s <= last; s++) {
                    const float *k = qkv + ((size_t)b * T + s) * ld + (size_t)(NH + g) * hs;
                    double dot = 0.0;
                    for (c = 0; c < hs; c++) dot += (double)q[c] * k[c];
                    sc[s] = dot / sqrt((double)hs);
                    if (sc[s] > mx) mx = sc[s];
                }
                for (s = 0; s <= last; s++) sum += exp(sc[s] - mx);
                e = fabs(lse[((size_t)b * NH + h) * T + t] - (mx + log(sum)));
                if (!(e <= d_lse)) d_lse = e;
            }
    d_out = maxdiff(out_f, out_r, no);
    d_q = maxdiff_cols(g_f, g_r, (size_t)B * T, ld, 0, NH * hs);
    d_k = maxdiff_cols(g_f, g_r, (size_t)B * T, ld, NH * hs, (NH + NKV) * hs);
    d_v = maxdiff_cols(g_f, g_r, (size_t)B * T, ld, (NH + NKV) * hs, ld);
    snprintf(what, sizeof what, "B=%d T=%d NH=%d NKV=%d hs=%d %s", B, T, NH, NKV, hs,
             causal ? "causal" : "full");
    /* float sums in another order: a few ulp of O(1..10) values */
    CHECK(d_out <= 1e-5, "%s: out differs by %g\n", what, d_out);
    CHECK(d_lse <= 1e-5, "%s: lse differs from the double one by %g\n", what, d_lse);
    CHECK(d_q <= 5e-5, "%s: dq differs by %g\n", what, d_q);
    CHECK(d_k <= 5e-5, "%s: dk differs by %g\n", what, d_k);
    CHECK(d_v <= 5e-5, "%s: dv differs by %g\n", what, d_v);
    printf("%s - %-38s |diff| out %.1e lse %.1e dq %.1e dk %.1e dv %.1e\n",
           d_out <= 1e-5 && d_lse <= 1e-5 && fmax(d_q, fmax(d_k, d_v)) <= 5e-5 ? "ok" : "FAIL", what, d_out, d_lse, d_q, d_k, d_v);
    free(qkv); free(dout); free(g0); free(out_r); free(out_f); free(att); free(scratch);
    free(lse); free(g_r); free(g_f); free(sc);
}

/* the same inputs on 1 and 2 threads give the same bits */
static void same_bits_any_threads(void) {
    int B = 2, T = 150, NH = 4, NKV = 2, hs = 16, ld = (NH + 2 * NKV) * hs, k;
    size_t nqkv = (size_t)B * T * ld, no = (size_t)B * T * NH * hs, nl = (size_t)B * NH * T;
    float *qkv = randn(nqkv, 1.0f), *dout = randn(no, 1.0f);
    float *out[2], *lse[2], *g[2];
    for (k = 0; k < 2; k++) {
        trn_set_threads(k + 1);
        out[k] = (float *)malloc(sizeof(float) * no);
        lse[k] = (float *)malloc(sizeof(float) * nl);
        g[k] = (float *)calloc(nqkv, sizeof(float));
        trn_flash_attention_forward(out[k], lse[k], qkv, B, T, NH, NKV, hs, 1);
        trn_flash_attention_backward(g[k], dout, qkv, out[k], lse[k], B, T, NH, NKV, hs, 1);
    }
    CHECK(memcmp(out[0], out[1], sizeof(float) * no) == 0, "fused forward: bits differ between 1 and 2 threads\n");
    CHECK(memcmp(lse[0], lse[1], sizeof(float) * nl) == 0, "fused lse: bits differ between 1 and 2 threads\n");
    CHECK(memcmp(g[0], g[1], sizeof(float) * nqkv) == 0, "fused backward: bits differ between 1 and 2 threads\n");
    printf("ok - same bits on 1 and 2 threads\n");
    for (k = 0; k < 2; k++) { free(out[k]); free(lse[k]); free(g[k]); }
    free(qkv); free(dout);
    trn_set_threads(2);
}

/* through the tape: the op saves its output and lse, nothing of size T*T */
static void tape_keeps_no_tt(void) {
    trn_model m;
    trn_tensor *qkv, *a;
    int B = 2, T = 200, NH = 4, NKV = 1, hs = 8, shape[3];
    size_t before, bytes, want;
    float *host = randn((size_t)B * T * (NH + 2 * NKV) * hs, 1.0f);
    CHECK(trn_model_init(&m, NULL) == TRN_OK, "model init\n");
    shape[0] = B; shape[1] = T; shape[2] = (NH + 2 * NKV) * hs;
    qkv = trn_input(&m, "qkv", 3, shape, host);
    before = m.arena.used + m.arena.spilled;
    a = trn_attention_gqa(&m, qkv, NH, NKV, 1);
    bytes = m.arena.used + m.arena.spilled - before;
    want = sizeof(float) * ((size_t)B * T * NH * hs + (size_t)B * NH * T);
    CHECK(a->ndim == 3 && a->shape[0] == B && a->shape[1] == T && a->shape[2] == NH * hs,
          "trn_attention_gqa: output shape (%d,%d,%d)\n", a->shape[0], a->shape[1], a->shape[2]);
    CHECK(bytes >= want && bytes <= want + 256,
          "trn_attention_gqa took %zu arena bytes, want out + lse = %zu (a (T,T) buffer would be %zu)\n", bytes,
          want, sizeof(float) * (size_t)B * NH * T * T);
    printf("ok - the tape op keeps out + lse: %zu arena bytes\n", bytes);
    trn_model_free(&m);
    free(host);
}

/* m.attention_materialized: the tape runs the reference pair, keeps the
   (B,NH,T,T) probabilities, and gives the fused path's loss and gradient */
static void tape_materialized_agrees(void) {
    int B = 2, T = 37, NH = 4, NKV = 2, hs = 8, mode, shape[3] = {B, T, (NH + 2 * NKV) * hs};
    size_t n = (size_t)B * T * shape[2], n_out = (size_t)B * T * NH * hs, i, bytes[2] = {0, 0};
    float *host = randn(n, 1.0f), *target = randn(n_out, 1.0f), loss[2], *g[2];
    double worst = 0.0;
    for (mode = 0; mode < 2; mode++) {
        trn_model m;
        trn_tensor *qkv, *a, *l;
        size_t before;
        CHECK(trn_model_init(&m, NULL) == TRN_OK, "model init\n");
        qkv = trn_param(&m, "qkv", 3, shape);
        CHECK(trn_model_alloc(&m) == TRN_OK, "alloc\n");
        trn_write(&m, qkv, host);
        m.attention_materialized = mode;
        trn_zero_grad(&m);
        trn_reset(&m);
        before = m.arena.used + m.arena.spilled;
        a = trn_attention_gqa(&m, qkv, NH, NKV, 1);
        bytes[mode] = m.arena.used + m.arena.spilled - before;
        l = trn_mse(&m, a, target);
        loss[mode] = trn_item(&m, l);
        trn_backward(&m, l);
        g[mode] = (float *)malloc(sizeof(float) * n);
        trn_read_grad(&m, qkv, g[mode]);
        trn_model_free(&m);
    }
    for (i = 0; i < n; i++) { /* (not fmax: GCC 12 for AArch64 crashes vectorizing that reduction) */
        double d = fabs((double)g[0][i] - (double)g[1][i]);
        if (d > worst) worst = d;
    }
    CHECK(fabs((double)loss[0] - (double)loss[1]) < 1e-6 && worst < 1e-6,
          "materialized vs fused through the tape: loss %.9g vs %.9g, largest gradient difference %.3g\n",
          loss[0], loss[1], worst);
    CHECK(bytes[1] >= bytes[0] + sizeof(float) * (size_t)B * NH * T * T - sizeof(float) * (size_t)B * NH * T,
          "materialized keeps the (B,NH,T,T) probabilities: %zu vs %zu arena bytes\n", bytes[1], bytes[0]);
    printf("ok - materialized attention through the tape: same loss, gradients within %.3g, %zu vs %zu arena bytes\n",
           worst, bytes[1], bytes[0]);
    free(g[0]); free(g[1]); free(host); free(target);
}

int main(void) {
    static const int shapes[][5] = {
        /* B  T   NH NKV hs */
        {1, 1, 1, 1, 5},   {2, 7, 3, 3, 5},   {1, 63, 2, 1, 16}, {2, 65, 4, 2, 16},
        {1, 130, 4, 1, 16}, {1, 64, 2, 2, 64}, {1, 129, 12, 12, 64}, {3, 100, 8, 2, 24},
        {1, 300, 2, 1, 32},
    };
    size_t i;
    int causal;
    trn_rng_seed(&RNG, 42);
    trn_set_threads(2);
    for (i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (causal = 0; causal <= 1; causal++)
            agree(shapes[i][0], shapes[i][1], shapes[i][2], shapes[i][3], shapes[i][4], causal);
    same_bits_any_threads();
    tape_keeps_no_tt();
    tape_materialized_agrees();
    return check_summary();
}
