/* test_matmul.c - the fast trn_sgemm against the plain trn_sgemm_ref.

   Shapes are chosen to hit every edge of the blocking: sizes that are not
   multiples of the register tile (12x32 with AVX-512, 6x16 with AVX2, 4x16
   in plain C), K that spans several KC=256 blocks, M past MC and N past
   NC=3072, single rows and columns. Each shape runs with all four
   transpose cases, alpha != 1, beta in {0, 1, 0.5}, and row strides
   (lda, ldb, ldc) wider than the matrices, as attention uses them.

   Error bound per element: |fast - ref| <= 1e-5 * (|alpha| sum_k |a_ik b_kj|
   + |beta c_ij|), the size a float sum of those terms may be off by.
   beta = 0 runs with C full of NaN (it must be overwritten, never read),
   and the padding columns of C (ldc > N) must come back untouched.
   Also: the same bits for 1, 2 and 3 threads, calls made from inside a
   parallel region (each thread its own product and packing buffer), and
   the right answer when the packing buffer cannot be allocated. */
#include <stdlib.h>
/* an allocator that can be told to fail, to test the out-of-memory path */
static int g_fail_alloc;
static void *test_malloc(size_t n) { return g_fail_alloc ? NULL : malloc(n); }
#define TRN_MALLOC(n) test_malloc(n)
#define TRN_FREE(p) free(p)
#define TRAIN_IMPLEMENTATION
#include "train.h"
#include "check.h"

#include <string.h>

static trn_rng RNG;

static float *rand_matrix(size_t n) {
    float *x = (float *)malloc(n * sizeof(float) + 1);
    size_t i;
    for (i = 0; i < n; i++) x[i] = 2.0f * trn_rng_uniform(&RNG) - 1.0f;
    return x;
}

/* one product; returns 1 when every element is within the bound */
static int check_case(int ta, int tb, int M, int N, int K, int pad, float alpha, float beta) {
    /* op(A) (M,K): stored (M,K) or, transposed, (K,M); rows padded by `pad` */
    int arows = ta ? K : M, acols = ta ? M : K, brows = tb ? N : K, bcols = tb ? K : N;
    int lda = acols + pad, ldb = bcols + pad, ldc = N + pad;
    size_t asz = (size_t)arows * lda, bsz = (size_t)brows * ldb, csz = (size_t)M * ldc;
    float *A = rand_matrix(asz), *B = rand_matrix(bsz), *C0 = rand_matrix(csz);
    float *C = (float *)malloc(csz * sizeof(float) + 1), *R = (float *)malloc(csz * sizeof(float) + 1);
    float *absA = (float *)malloc(asz * sizeof(float) + 1), *absB = (float *)malloc(bsz * sizeof(float) + 1);
    float *S = (float *)malloc(csz * sizeof(float) + 1);
    size_t i;
    int r, c, ok = 1;
    double worst = 0.0;
    const float sentinel = 12345.0f;

    for (r = 0; r < M; r++)
        for (c = N; c < ldc; c++) C0[(size_t)r * ldc + c] = sentinel;
    if (beta == 0.0f) /* old C must not be read */
        for (r = 0; r < M; r++)
            for (c = 0; c < N; c++) C0[(size_t)r * ldc + c] = NAN;
    memcpy(C, C0, csz * sizeof(float));
    memcpy(R, C0, csz * sizeof(float));
    trn_sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    trn_sgemm_ref(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, R, ldc);
    /* the scale of each element: |alpha| * sum_k |a||b| */
    for (i = 0; i < asz; i++) absA[i] = fabsf(A[i]);
    for (i = 0; i < bsz; i++) absB[i] = fabsf(B[i]);
    trn_sgemm_ref(ta, tb, M, N, K, fabsf(alpha), absA, lda, absB, ldb, 0.0f, S, ldc);
    for (r = 0; r < M; r++) {
        for (c = 0; c < ldc; c++) {
            size_t k = (size_t)r * ldc + c;
            if (c >= N) { /* padding: untouched */
                if (C[k] != sentinel) ok = 0;
                continue;
            }
            {
                double old = beta == 0.0f ? 0.0 : fabs((double)beta * C0[k]);
                double bound = 1e-5 * ((double)S[k] + old) + 1e-30;
                double err = fabs((double)C[k] - R[k]);
                if (!(err <= bound)) ok = 0; /* also catches NaN */
                if (err / bound > worst) worst = err / bound;
            }
        }
    }
    CHECK(ok, "sgemm ta=%d tb=%d M=%d N=%d K=%d pad=%d alpha=%g beta=%g: worst err/bound %.3g\n", ta,
          tb, M, N, K, pad, alpha, beta, worst);
    free(A); free(B); free(C0); free(C); free(R); free(absA); free(absB); free(S);
    return ok;
}

/* bitwise the same result for 1, 2 and 3 threads, and on a repeat */
static void check_threads(int ta, int tb, int M, int N, int K) {
    int lda = ta ? M : K, ldb = tb ? K : N, t;
    float *A = rand_matrix((size_t)M * K), *B = rand_matrix((size_t)K * N);
    float *C1 = (float *)malloc((size_t)M * N * sizeof(float)), *Ct = (float *)malloc((size_t)M * N * sizeof(float));
    int saved = trn_get_threads();
    trn_set_threads(1);
    trn_sgemm(ta, tb, M, N, K, 0.5f, A, lda, B, ldb, 0.0f, C1, N);
    for (t = 1; t <= 3; t++) {
        trn_set_threads(t);
        trn_sgemm(ta, tb, M, N, K, 0.5f, A, lda, B, ldb, 0.0f, Ct, N);
        CHECK(memcmp(C1, Ct, (size_t)M * N * sizeof(float)) == 0,
              "sgemm ta=%d tb=%d %dx%dx%d: %d threads differ from 1 thread\n", ta, tb, M, N, K, t);
    }
    trn_set_threads(saved);
    free(A); free(B); free(C1); free(Ct);
}

/* many small products at once from a parallel loop, like attention's heads */
static void check_nested(void) {
    enum { H = 8, T = 40, D = 24 };
    float *Q = rand_matrix((size_t)T * 3 * H * D), *out = (float *)malloc(sizeof(float) * H * T * T);
    float *ref = (float *)malloc(sizeof(float) * H * T * T);
    int h, ok = 1;
    size_t i;
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (h = 0; h < H; h++) { /* S = Q K^T with Q, K strided views of one qkv row block */
        const float *q = Q + h * D, *k = Q + H * D + h * D;
        trn_sgemm(0, 1, T, T, D, 0.125f, q, 3 * H * D, k, 3 * H * D, 0.0f, out + (size_t)h * T * T, T);
    }
    for (h = 0; h < H; h++) {
        const float *q = Q + h * D, *k = Q + H * D + h * D;
        trn_sgemm_ref(0, 1, T, T, D, 0.125f, q, 3 * H * D, k, 3 * H * D, 0.0f, ref + (size_t)h * T * T, T);
    }
    for (i = 0; i < (size_t)H * T * T; i++)
        if (!(fabs((double)out[i] - ref[i]) <= 1e-5 * D * 0.125)) ok = 0;
    CHECK(ok, "sgemm called from inside a parallel loop differs from the reference\n");
    free(Q); free(out); free(ref);
}

/* trn_linear's pair (trn_sgemm inside) against its plain loops */
static void check_linear_ref(void) {
    enum { N = 7, C = 19, OC = 11 };
    static float x[N * C], w[OC * C], b[OC], y[N * OC], yr[N * OC], dy[N * OC];
    static float dx[N * C], dxr[N * C], dw[OC * C], dwr[OC * C], db[OC], dbr[OC];
    trn_rng rng;
    int i;
    double e = 0;
    trn_rng_seed(&rng, 5);
    for (i = 0; i < N * C; i++) x[i] = trn_rng_normal(&rng), dx[i] = dxr[i] = 0.25f;
    for (i = 0; i < OC * C; i++) w[i] = trn_rng_normal(&rng), dw[i] = dwr[i] = -0.5f;
    for (i = 0; i < OC; i++) b[i] = trn_rng_normal(&rng), db[i] = dbr[i] = 1.0f;
    for (i = 0; i < N * OC; i++) dy[i] = trn_rng_normal(&rng);
    trn_linear_forward(y, x, w, b, N, C, OC);
    trn_linear_forward_ref(yr, x, w, b, N, C, OC);
    trn_linear_backward(dx, dw, db, dy, x, w, N, C, OC);
    trn_linear_backward_ref(dxr, dwr, dbr, dy, x, w, N, C, OC);
    for (i = 0; i < N * OC; i++) e = fmax(e, fabs(y[i] - yr[i]));
    for (i = 0; i < N * C; i++) e = fmax(e, fabs(dx[i] - dxr[i]));
    for (i = 0; i < OC * C; i++) e = fmax(e, fabs(dw[i] - dwr[i]));
    for (i = 0; i < OC; i++) e = fmax(e, fabs(db[i] - dbr[i]));
    CHECK(e < 1e-4, "trn_linear_forward/_backward agree with their plain loops (max diff %g)\n", e);
}

int main(void) {
    static const int shapes[][3] = { /* M, N, K */
        {1, 1, 1},   {7, 13, 5},     {65, 33, 129},  {300, 257, 31}, {12, 32, 256},
        {13, 33, 257}, {1, 100, 7},  {100, 1, 7},    {3, 3, 600},    {64, 64, 64},
        {24, 64, 513}, {11, 3100, 9}, {290, 40, 20}, {2, 50, 300},   {37, 17, 1},
        {4, 700, 11}, {5, 40, 6},
    };
    static const float betas[3] = {0.0f, 1.0f, 0.5f};
    int s, ta, tb, b, pad;
    trn_rng_seed(&RNG, 7);
    /* first, before any packing buffer exists: no memory for it must still
       give the right answer (through the reference loop) */
    g_fail_alloc = 1;
    {
        float A[40 * 30], B[30 * 20], C[40 * 20], R[40 * 20];
        int i, ok = 1;
        for (i = 0; i < 40 * 30; i++) A[i] = 2.0f * trn_rng_uniform(&RNG) - 1.0f;
        for (i = 0; i < 30 * 20; i++) B[i] = 2.0f * trn_rng_uniform(&RNG) - 1.0f;
        trn_sgemm(0, 0, 40, 20, 30, 1.0f, A, 30, B, 20, 0.0f, C, 20);
        trn_sgemm_ref(0, 0, 40, 20, 30, 1.0f, A, 30, B, 20, 0.0f, R, 20);
        for (i = 0; i < 40 * 20; i++)
            if (!(fabs((double)C[i] - R[i]) <= 1e-5 * 30)) ok = 0;
        CHECK(ok, "sgemm without memory for its packing buffer is wrong\n");
    }
    g_fail_alloc = 0;
    for (s = 0; s < (int)(sizeof shapes / sizeof shapes[0]); s++)
        for (ta = 0; ta < 2; ta++)
            for (tb = 0; tb < 2; tb++)
                for (b = 0; b < 3; b++)
                    for (pad = 0; pad <= 5; pad += 5)
                        check_case(ta, tb, shapes[s][0], shapes[s][1], shapes[s][2], pad,
                                   (b + pad) % 2 ? -0.75f : 1.0f, betas[b]);
    /* K = 0 and alpha = 0: C = beta * C, A and B not used */
    check_case(0, 0, 5, 6, 0, 2, 1.0f, 0.5f);
    check_case(0, 0, 5, 6, 0, 2, 1.0f, 0.0f);
    check_case(1, 1, 9, 4, 3, 1, 0.0f, 0.5f);
    /* big enough to use every thread (M*N*K >= 2^22) */
    check_threads(0, 1, 300, 257, 129);
    check_threads(1, 0, 131, 515, 300);
    check_threads(0, 0, 97, 1000, 70);
    check_threads(0, 0, 3, 5000, 400); /* few rows: straight from B */
    check_threads(1, 0, 2, 6001, 400);
    check_threads(0, 1, 3, 5000, 400); /* few rows: dot products */
    check_nested();
    check_linear_ref();
    return check_summary();
}
