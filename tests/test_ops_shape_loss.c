/* test_ops_shape_loss.c - dropout, reshape, transpose, slice, concat, sum/mean,
   batched matmul, cross-entropy with ignore_index and label smoothing,
   BCE with logits, L1 and Huber: each op's forward against a formula
   written here, and its backward against central finite differences with
   the public checker trn_gradcheck. Dropout also: evaluation mode is the
   identity, the kept fraction, the same mask from the same RNG state, and
   its RNG position through a training checkpoint. */
#define TRAIN_IMPLEMENTATION
#include "train.h"
#include "extras/train_ops.h"
#include "check.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static trn_model M;
static trn_tensor *P[4];

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
    trn_rng_seed(&rng, 77);
    for (i = 0; i < np; i++)
        for (j = 0; j < P[i]->size; j++) {
            float v = lo + (hi - lo) * trn_rng_uniform(&rng);
            if (lo < 0 && fabsf(v) < 0.05f) v = v < 0 ? v - 0.05f : v + 0.05f;
            P[i]->data[j] = v;
        }
}

static void grad_ok(const char *name, trn_tensor *(*build)(trn_model *, void *), float eps, float atol, float rtol) {
    trn_gradcheck_desc d;
    trn_gradcheck_result r;
    int bad;
    memset(&d, 0, sizeof d);
    d.eps = eps; d.atol = atol; d.rtol = rtol; d.max_per_param = 48;
    bad = trn_gradcheck(&M, build, NULL, &d, &r);
    CHECK(bad == 0, "%s: %d of %d gradients off (worst %.2f of tolerance)\n", name, bad, r.checked, r.worst);
    CHECK(r.largest > 1e-3, "%s: all gradients ~0 (largest %g): the check proves nothing\n", name, r.largest);
    printf("ok - %-34s %3d elements, worst %.3f of tolerance\n", name, r.checked, r.worst);
}

/* ---- the graphs (P[] are the parameters of the current model) ---------- */
static trn_tensor *g_dropout(trn_model *m, void *u) {
    trn_rng_seed(&m->rng, 5); /* the same mask on every probe */
    return trn_dropout(m, P[0], 0.3f);
}
static trn_tensor *g_reshape(trn_model *m, void *u) {
    int s[2] = {4, 6};
    return trn_mul(m, trn_reshape(m, P[0], 2, s), P[1]); /* a view, then an op that reads it */
}
static trn_tensor *g_transpose01(trn_model *m, void *u) { return trn_transpose(m, P[0], 0, 1); }
static trn_tensor *g_transpose13(trn_model *m, void *u) { return trn_transpose(m, P[0], 1, -1); }
static trn_tensor *g_slice(trn_model *m, void *u) { return trn_slice(m, P[0], 2, 3); }
static trn_tensor *g_concat(trn_model *m, void *u) { return trn_concat(m, P[0], P[1]); }
static trn_tensor *g_sum(trn_model *m, void *u) { return trn_sum(m, P[0]); }
static trn_tensor *g_mean(trn_model *m, void *u) { return trn_mean(m, P[0]); }
static trn_tensor *g_sum_all(trn_model *m, void *u) { return trn_sum_all(m, P[0]); }
static trn_tensor *g_mean_all(trn_model *m, void *u) { return trn_mean_all(m, P[0]); }
static int TA, TB;
static trn_tensor *g_bmm(trn_model *m, void *u) { return trn_bmm(m, P[0], P[1], TA, TB); }
static int XT[12] = {3, -100, 0, 6, 2, -100, 5, 1, 4, 0, 6, 2};
static float SMOOTH;
static trn_tensor *g_xent_ex(trn_model *m, void *u) { return trn_cross_entropy_ex(m, P[0], XT, 7, -100, SMOOTH); }
static float TGT01[12] = {0.0f, 1.0f, 1.0f, 0.3f, 0.0f, 0.9f, 1.0f, 0.0f, 0.5f, 0.0f, 1.0f, 0.2f};
static float TGT[12] = {0.3f, -1.2f, 0.8f, 0.0f, 2.0f, -0.5f, 0.1f, 0.9f, -0.7f, 1.5f, -2.0f, 0.25f};
static trn_tensor *g_bce(trn_model *m, void *u) { return trn_bce_with_logits(m, P[0], TGT01); }
static trn_tensor *g_l1(trn_model *m, void *u) { return trn_l1(m, P[0], TGT); }
static trn_tensor *g_huber(trn_model *m, void *u) { return trn_huber(m, P[0], TGT, 0.5f); }
/* ops composed: attention by hand with bmm, softmax, transpose, reshape */
static trn_tensor *g_attn_by_hand(trn_model *m, void *u) {
    int s4[4] = {1, 5, 2, 3}, s3[3] = {2, 5, 3}, so[3] = {1, 5, 6};
    trn_tensor *q = trn_transpose(m, trn_reshape(m, trn_slice(m, P[0], 0, 6), 4, s4), 1, 2); /* (1,2,5,3) */
    trn_tensor *k = trn_transpose(m, trn_reshape(m, trn_slice(m, P[0], 6, 6), 4, s4), 1, 2);
    trn_tensor *v = trn_transpose(m, trn_reshape(m, trn_slice(m, P[0], 12, 6), 4, s4), 1, 2);
    trn_tensor *att = trn_softmax(m, trn_bmm(m, trn_reshape(m, q, 3, s3), trn_reshape(m, k, 3, s3), 0, 1));
    trn_tensor *o = trn_transpose(m, trn_reshape(m, trn_bmm(m, att, trn_reshape(m, v, 3, s3), 0, 0), 4, s4), 1, 2);
    (void)so;
    return trn_mean(m, o);
}

static void test_dropout(void) {
    static const int s[][4] = {{40, 50}}, n[] = {2};
    trn_tensor *y, *y2;
    size_t i, zeros = 0, bad = 0;
    float p = 0.3f;
    model_new(1, s, n, -1.0f, 1.0f);
    trn_rng_seed(&M.rng, 11);
    trn_reset(&M);
    y = trn_dropout(&M, P[0], p);
    for (i = 0; i < y->size; i++) {
        if (y->data[i] == 0.0f) zeros++;
        else if (fabsf(y->data[i] - P[0]->data[i] / (1.0f - p)) > 1e-6f) bad++;
    }
    /* 2000 elements, p = 0.3: 600 expected, std 20.5; 5 std either way */
    CHECK(zeros > 497 && zeros < 703 && bad == 0, "dropout: %zu of 2000 zeroed (p=0.3), %zu kept values not x/(1-p)\n",
          zeros, bad);
    y2 = trn_dropout(&M, P[0], p);
    CHECK(memcmp(y->data, y2->data, y->size * 4) != 0, "two calls drew the same mask\n");
    trn_rng_seed(&M.rng, 11);
    y2 = trn_dropout(&M, P[0], p);
    CHECK(memcmp(y->data, y2->data, y->size * 4) == 0, "the same RNG state gave another mask\n");
    trn_eval(&M);
    CHECK(trn_dropout(&M, P[0], p) == P[0], "evaluation mode: dropout is not the identity\n");
    trn_train(&M);
    CHECK(trn_dropout(&M, P[0], 0.0f) == P[0], "p = 0: not the identity\n");
    y = trn_dropout(&M, P[0], 1.0f);
    for (i = 0, bad = 0; i < y->size; i++) bad += y->data[i] != 0.0f;
    CHECK(bad == 0, "p = 1 kept %zu values\n", bad);
    printf("ok - dropout: %zu of 2000 dropped at p=0.3, scale 1/(1-p), eval = identity\n", zeros);
    grad_ok("dropout (p=0.3)", g_dropout, 1e-2f, 1e-4f, 1e-3f);
    trn_model_free(&M);
}

/* the RNG position of dropout travels in the checkpoint: dropout after a
   resume draws what the uninterrupted run draws */
static void test_dropout_checkpoint(void) {
    static const int s[][4] = {{8, 16}}, n[] = {2};
    char path[256];
    float a[128], b[128];
    trn_model m2;
    snprintf(path, sizeof path, "/tmp/test_ops_shape_loss_%ld.safetensors", (long)getpid());
    model_new(1, s, n, -1.0f, 1.0f);
    trn_rng_seed(&M.rng, 99);
    trn_reset(&M);
    trn_dropout(&M, P[0], 0.5f); /* advance the RNG */
    CHECK(trn_checkpoint_save(path, &M, NULL, NULL) == TRN_OK, "save: %s\n", trn_error_reason());
    memcpy(a, trn_dropout(&M, P[0], 0.5f)->data, sizeof a);
    trn_model_init(&m2, NULL);
    trn_param(&m2, "p0", 2, s[0]);
    trn_model_alloc(&m2);
    CHECK(trn_checkpoint_load(path, &m2, NULL, NULL) == TRN_OK, "load: %s\n", trn_error_reason());
    trn_reset(&m2);
    memcpy(b, trn_dropout(&m2, m2.params[0], 0.5f)->data, sizeof b);
    CHECK(memcmp(a, b, sizeof a) == 0, "dropout after a resume differs from the uninterrupted run\n");
    printf("ok - dropout's RNG position is in the checkpoint: the resumed mask is the same\n");
    unlink(path);
    trn_model_free(&m2);
    trn_model_free(&M);
}

static void test_shapes(void) {
    trn_tensor *y;
    int i, j, k;
    { /* reshape: a view of the same floats */
        static const int s[][4] = {{2, 3, 4}, {6}}, n[] = {3, 1};
        int ns[2] = {4, 6};
        model_new(2, s, n, -1.0f, 1.0f);
        trn_reset(&M);
        y = trn_reshape(&M, P[0], 2, ns);
        CHECK(y->data == P[0]->data && y->ndim == 2 && y->shape[0] == 4 && y->shape[1] == 6, "reshape is not a view\n");
        grad_ok("reshape (a view) then mul", g_reshape, 1e-2f, 1e-4f, 1e-3f);
        trn_model_free(&M);
    }
    { /* transpose */
        static const int s[][4] = {{2, 3, 4, 5}}, n[] = {4};
        int bad = 0;
        model_new(1, s, n, -1.0f, 1.0f);
        trn_reset(&M);
        y = trn_transpose(&M, P[0], 1, 3); /* (2,5,4,3) */
        CHECK(y->shape[1] == 5 && y->shape[3] == 3, "transpose shape\n");
        for (i = 0; i < 3; i++)
            for (j = 0; j < 4; j++)
                for (k = 0; k < 5; k++)
                    bad += y->data[((1 * 5 + k) * 4 + j) * 3 + i] != P[0]->data[((1 * 3 + i) * 4 + j) * 5 + k];
        CHECK(bad == 0, "transpose(1,3): %d elements misplaced\n", bad);
        grad_ok("transpose (0,1)", g_transpose01, 1e-2f, 1e-4f, 1e-3f);
        grad_ok("transpose (1,-1)", g_transpose13, 1e-2f, 1e-4f, 1e-3f);
        trn_model_free(&M);
    }
    { /* slice, concat */
        static const int s[][4] = {{3, 7}, {3, 2}}, n[] = {2, 2};
        model_new(2, s, n, -1.0f, 1.0f);
        trn_reset(&M);
        y = trn_slice(&M, P[0], 2, 3);
        CHECK(y->shape[1] == 3 && y->data[4] == P[0]->data[7 + 3], "slice forward\n");
        y = trn_concat(&M, P[0], P[1]);
        CHECK(y->shape[1] == 9 && y->data[9 + 6] == P[0]->data[7 + 6] && y->data[9 + 8] == P[1]->data[2 + 1],
              "concat forward\n");
        grad_ok("slice [2,5) of 7", g_slice, 1e-2f, 1e-4f, 1e-3f);
        grad_ok("concat (3,7)|(3,2)", g_concat, 1e-2f, 1e-4f, 1e-3f);
        trn_model_free(&M);
    }
    { /* sum, mean */
        static const int s[][4] = {{2, 3, 5}}, n[] = {3};
        double r = 0, all = 0;
        model_new(1, s, n, -1.0f, 1.0f);
        trn_reset(&M);
        y = trn_sum(&M, P[0]);
        for (i = 0; i < 5; i++) r += P[0]->data[5 * 4 + i];
        for (i = 0; i < 30; i++) all += P[0]->data[i];
        CHECK(y->ndim == 2 && y->shape[1] == 3, "sum drops the last dim\n");
        CHECK_NEAR(y->data[4], r, 1e-6, 1e-6, "sum forward");
        CHECK_NEAR(trn_mean(&M, P[0])->data[4], r / 5, 1e-6, 1e-6, "mean forward");
        CHECK_NEAR(trn_sum_all(&M, P[0])->data[0], all, 1e-6, 1e-6, "sum_all forward");
        CHECK_NEAR(trn_mean_all(&M, P[0])->data[0], all / 30, 1e-6, 1e-6, "mean_all forward");
        grad_ok("sum (last dim)", g_sum, 1e-2f, 1e-4f, 1e-3f);
        grad_ok("mean (last dim)", g_mean, 1e-2f, 1e-4f, 1e-3f);
        grad_ok("sum_all", g_sum_all, 1e-2f, 1e-4f, 1e-3f);
        grad_ok("mean_all", g_mean_all, 1e-2f, 1e-4f, 1e-3f);
        trn_model_free(&M);
    }
}

static void test_bmm(void) {
    int ta, tb;
    for (ta = 0; ta < 2; ta++)
        for (tb = 0; tb < 2; tb++) {
            /* op(a) (3,4), op(b) (4,5), batch (2,3) */
            int sa[4] = {2, 3, ta ? 4 : 3, ta ? 3 : 4}, sb[4] = {2, 3, tb ? 5 : 4, tb ? 4 : 5};
            int shapes[2][4], nd[2] = {4, 4}, i, j, k;
            double want = 0;
            char name[48];
            trn_tensor *y;
            memcpy(shapes[0], sa, sizeof sa); memcpy(shapes[1], sb, sizeof sb);
            model_new(2, (const int(*)[4])shapes, nd, -1.0f, 1.0f);
            trn_reset(&M);
            TA = ta; TB = tb;
            y = trn_bmm(&M, P[0], P[1], ta, tb);
            CHECK(y->shape[2] == 3 && y->shape[3] == 5, "bmm shape\n");
            /* batch 4 (of 6), row i = 2, column j = 3 */
            for (i = 2, j = 3, k = 0; k < 4; k++)
                want += (double)P[0]->data[4 * 12 + (ta ? k * 3 + i : i * 4 + k)] * P[1]->data[4 * 20 + (tb ? j * 4 + k : k * 5 + j)];
            CHECK_NEAR(y->data[4 * 15 + 2 * 5 + 3], want, 1e-5, 1e-5, "bmm forward");
            snprintf(name, sizeof name, "bmm (trans_a %d, trans_b %d)", ta, tb);
            grad_ok(name, g_bmm, 1e-2f, 1e-4f, 1e-3f);
            trn_model_free(&M);
        }
}

static void test_losses(void) {
    trn_tensor *y;
    int i, v;
    { /* cross-entropy: ignore_index -100 on rows 1 and 5, V = 7 of Vp = 9 */
        static const int s[][4] = {{2, 6, 9}}, n[] = {3};
        double want = 0;
        model_new(1, s, n, -2.0f, 2.0f);
        trn_reset(&M);
        y = trn_cross_entropy_ex(&M, P[0], XT, 7, -100, 0.1f);
        for (i = 0; i < 12; i++) {
            const float *l = P[0]->data + i * 9;
            double mx = l[0], z = 0, sum = 0;
            if (XT[i] == -100) continue;
            for (v = 1; v < 7; v++) mx = fmax(mx, l[v]);
            for (v = 0; v < 7; v++) { z += exp(l[v] - mx); sum += l[v]; }
            z = mx + log(z);
            want += z - 0.9 * l[XT[i]] - 0.1 * sum / 7; /* (1-s)(z - l_t) + s * mean_v(z - l_v) */
        }
        CHECK_NEAR(y->data[0], want / 10, 1e-5, 1e-5, "cross_entropy_ex forward (10 of 12 rows)");
        /* smoothing 0, nothing ignored: the plain cross-entropy */
        {
            int t2[12];
            for (i = 0; i < 12; i++) t2[i] = XT[i] < 0 ? 1 : XT[i];
            CHECK_NEAR(trn_cross_entropy_ex(&M, P[0], t2, 7, -100, 0.0f)->data[0],
                       trn_cross_entropy(&M, P[0], t2, 7)->data[0], 1e-6, 1e-6, "cross_entropy_ex = cross_entropy");
        }
        SMOOTH = 0.0f;
        grad_ok("cross_entropy_ex (ignore 2 rows)", g_xent_ex, 1e-2f, 1e-3f, 5e-3f);
        SMOOTH = 0.1f;
        grad_ok("cross_entropy_ex (+ smoothing 0.1)", g_xent_ex, 1e-2f, 1e-3f, 5e-3f);
        trn_model_free(&M);
    }
    { /* BCE, L1, Huber on 12 values */
        static const int s[][4] = {{3, 4}}, n[] = {2};
        double b = 0, l1 = 0, hu = 0;
        model_new(1, s, n, -3.0f, 3.0f);
        P[0]->data[3] = 0.2f;  /* Huber: one |d| < delta ... */
        P[0]->data[7] = 1.15f; /* ... and another (targets 0.0 and 0.9) */
        trn_reset(&M);
        for (i = 0; i < 12; i++) {
            double x = P[0]->data[i], d = x - TGT[i];
            b += log(1 + exp(x)) - x * TGT01[i];
            l1 += fabs(d);
            hu += fabs(d) < 0.5 ? 0.5 * d * d : 0.5 * (fabs(d) - 0.25);
        }
        CHECK_NEAR(trn_bce_with_logits(&M, P[0], TGT01)->data[0], b / 12, 1e-6, 1e-5, "bce_with_logits forward");
        CHECK_NEAR(trn_l1(&M, P[0], TGT)->data[0], l1 / 12, 1e-6, 1e-5, "l1 forward");
        CHECK_NEAR(trn_huber(&M, P[0], TGT, 0.5f)->data[0], hu / 12, 1e-6, 1e-5, "huber forward");
        grad_ok("bce_with_logits", g_bce, 1e-2f, 1e-4f, 1e-3f);
        grad_ok("l1", g_l1, 1e-3f, 1e-4f, 1e-3f);
        grad_ok("huber (delta 0.5)", g_huber, 1e-3f, 1e-4f, 1e-3f);
        trn_model_free(&M);
    }
    { /* BCE does not overflow for large logits */
        static const int s[][4] = {{2}}, n[] = {1};
        static const float t[2] = {1.0f, 0.0f};
        model_new(1, s, n, 0.0f, 1.0f);
        P[0]->data[0] = 200.0f; P[0]->data[1] = -200.0f;
        trn_reset(&M);
        y = trn_bce_with_logits(&M, P[0], t);
        CHECK(y->data[0] == 0.0f, "BCE of confident right answers: %g (want 0)\n", y->data[0]);
        trn_model_free(&M);
    }
}

static void test_composed(void) {
    static const int s[][4] = {{1, 5, 18}}, n[] = {3};
    model_new(1, s, n, -1.0f, 1.0f);
    grad_ok("attention by hand (bmm, softmax, ...)", g_attn_by_hand, 1e-2f, 1e-3f, 1e-2f);
    trn_model_free(&M);
}

int main(void) {
    trn_set_threads(2);
    test_dropout();
    test_dropout_checkpoint();
    test_shapes();
    test_bmm();
    test_losses();
    test_composed();
    return check_summary();
}
