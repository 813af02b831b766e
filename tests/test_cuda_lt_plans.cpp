// build: -O1 -g1 -Wno-maybe-uninitialized
/* tests/test_cuda_lt_plans.cpp - cuBLASLt once per problem (train_cuda.h's
   >>lt-plans), on the harness with real arithmetic at small shapes:
     1. the bf16 matmuls of a layer (forward with bias, the fused GELU
        forward, the DGELU backward, dinp and dW, and dW with its bias
        gradient from the BGRADB epilogue, as train.h asks for a parameter
        gradient known to be zero), run twice: one heuristic query and one
        descriptor per distinct problem the first time, none the second;
        BGRADB's dbias against the column sums of dout summed here, its dW
        against the plain dW;
     2. a D pointer 8 bytes off a 256-aligned block: its own plan, chosen for
        8-byte alignment; the harness checks every cublasLtMatmul's pointers
        against the alignment its algorithm was chosen for, so a plan reused
        across alignments would be an error here (and an algorithm chosen
        with cuBLASLt's default of 256 bytes for that pointer is one: shown
        directly);
     3. no algorithm at all (cuemu::lt_no_algo): no trn_fatal, the unfused
        path (cublasGemmEx, then a kernel for the epilogue), the note said
        once, and the same results as the fused calls within bf16 rounding
        (the unfused path rounds the GEMM's result once more before the
        bias or GELU); BGRADB's unfused form is the GEMM, then the column
        sums.
     4. train.h's grad_zero, end to end (bf16): a trn_linear's dW and
        dbias are WRITTEN by the first backward after trn_zero_grad (dbias
        by BGRADB), added to by the next (the column sums): 2 micro-batches
        give one batch's gradients.
   GPT-2's whole step is counted by tests/test_gpt2_plan.cpp. */
#define TRN_CUDA_FLASH_HS(X) /* no bf16 attention here: its kernels are not compiled (train_cuda.h) */
#define TRAIN_IMPLEMENTATION
#include "train.h"
#include "tests/cuda_on_cpu.h"
#define TRAIN_CUDA_IMPLEMENTATION
#include "train_cuda.h"
#include "tests/check.h"

#include <vector>

typedef std::vector<float> vec;
static const int N = 24, C = 32, OC = 40;
static const trn_backend *G;

static void *dev_bf16(const vec &v) {
    std::vector<__nv_bfloat16> h(v.size());
    for (size_t i = 0; i < v.size(); i++) h[i] = __float2bfloat16(v[i]);
    void *p = G->alloc(2 * v.size() + 64, TRN_KIND_TEMP);
    G->upload(p, h.data(), 2 * v.size());
    return p;
}
static vec get_bf16(const void *p, size_t n) {
    std::vector<__nv_bfloat16> h(n);
    G->download(h.data(), p, 2 * n);
    vec v(n);
    for (size_t i = 0; i < n; i++) v[i] = __bfloat162float(h[i]);
    return v;
}
static vec get_f32(const void *p, size_t n) {
    vec v(n);
    G->download(v.data(), p, 4 * n);
    return v;
}
static double rel(const vec &a, const vec &b) {
    double d = 0, m = 0;
    for (size_t i = 0; i < a.size(); i++) {
        d = fmax(d, fabs((double)a[i] - b[i]));
        m = fmax(m, fabs((double)b[i]));
    }
    return m > 0 ? d / m : d;
}

struct outputs { vec out, outg, pre, dpre, dinp, dw, dw2, db, db_ref; };
/* one layer's matmuls; d_off: bytes the forward's output sits off its block */
static outputs layer(int d_off) {
    trn_rng r;
    trn_rng_seed(&r, 5);
    vec x((size_t)N * C), w((size_t)OC * C), b(OC), g((size_t)N * OC);
    for (float &v : x) v = trn_rng_normal(&r);
    for (float &v : w) v = 0.2f * trn_rng_normal(&r);
    for (float &v : b) v = trn_rng_normal(&r);
    for (float &v : g) v = trn_rng_normal(&r);
    void *dx = dev_bf16(x), *dw_ = dev_bf16(w), *db = dev_bf16(b), *dg = dev_bf16(g);
    char *out = (char *)G->alloc(2 * (size_t)N * OC + 64, TRN_KIND_TEMP);
    void *outg = G->alloc(2 * (size_t)N * OC, TRN_KIND_TEMP), *pre = G->alloc(2 * (size_t)N * OC, TRN_KIND_TEMP);
    void *dpre = G->alloc(2 * (size_t)N * C, TRN_KIND_TEMP), *dinp = G->alloc(2 * (size_t)N * C, TRN_KIND_TEMP);
    float *dW = (float *)G->alloc(4 * (size_t)OC * C, TRN_KIND_TEMP);
    G->zero(dinp, 2 * (size_t)N * C);
    G->zero(dW, 4 * (size_t)OC * C);
    G->matmul_forward((float *)(out + d_off), (float *)dx, (float *)dw_, (float *)db, N, C, OC);
    G->matmul_gelu_forward((float *)outg, (float *)pre, (float *)dx, (float *)dw_, (float *)db, N, C, OC);
    G->matmul_dgelu_backward((float *)dpre, (float *)dg, (float *)dw_, (float *)dx, N, C, OC); /* x stands in for pre */
    G->matmul_backward((float *)dinp, dW, NULL, (float *)dg, (float *)dx, (float *)dw_, N, C, OC);
    /* dW and dbias known zero (flags 2): written, by one GEMM with the BGRADB
       epilogue; NaN where they start shows any read of the old values */
    float *dW2 = (float *)G->alloc(4 * (size_t)OC * C, TRN_KIND_TEMP), *dB = (float *)G->alloc(4 * (size_t)OC, TRN_KIND_TEMP);
    vec nan_w((size_t)OC * C, NAN), nan_b((size_t)OC, NAN);
    G->upload(dW2, nan_w.data(), 4 * nan_w.size());
    G->upload(dB, nan_b.data(), 4 * nan_b.size());
    G->matmul_backward_ex(NULL, dW2, dB, (float *)dg, (float *)dx, (float *)dw_, N, C, OC, 0, 2, 2);
    outputs o;
    o.dw2 = get_f32(dW2, (size_t)OC * C);
    o.db = get_f32(dB, (size_t)OC);
    o.db_ref.assign((size_t)OC, 0.0f); /* the column sums of dout (N,OC) as stored (bf16), in fp32, row by row */
    for (int n = 0; n < N; n++)
        for (int j = 0; j < OC; j++) o.db_ref[(size_t)j] += __bfloat162float(__float2bfloat16(g[(size_t)n * OC + j]));
    G->free(dW2);
    G->free(dB);
    o.out = get_bf16(out + d_off, (size_t)N * OC);
    o.outg = get_bf16(outg, (size_t)N * OC);
    o.pre = get_bf16(pre, (size_t)N * OC);
    o.dpre = get_bf16(dpre, (size_t)N * C);
    o.dinp = get_bf16(dinp, (size_t)N * C);
    o.dw = get_f32(dW, (size_t)OC * C);
    for (void *p : {dx, dw_, db, dg, (void *)out, outg, pre, dpre, dinp, (void *)dW}) G->free(p);
    return o;
}

/* 4: dW, dbias of y = x w^T + b under an MSE loss, over K micro-batches */
static vec accumulated(int K) {
    trn_model m;
    trn_rng r;
    static float X[N * C], Yt[N * OC];
    trn_rng_seed(&r, 9);
    for (float &v : X) v = trn_rng_normal(&r);
    for (float &v : Yt) v = trn_rng_normal(&r);
    trn_model_init(&m, G);
    trn_tensor *w = trn_param2(&m, "w", OC, C), *b = trn_param1(&m, "b", OC);
    trn_model_alloc(&m);
    trn_init_normal(&m, w, 0.0f, 0.3f, &r);
    trn_init_normal(&m, b, 0.0f, 0.3f, &r);
    trn_zero_grad(&m);
    for (int k = 0; k < K; k++) {
        int rows = N / K, shape[2] = {rows, C};
        trn_reset(&m);
        trn_tensor *x = trn_input(&m, "x", 2, shape, X + (size_t)k * rows * C);
        trn_tensor *loss = trn_mse(&m, trn_linear(&m, x, w, b), Yt + (size_t)k * rows * OC);
        trn_backward_scaled(&m, loss, 1.0f / (float)K);
    }
    vec g = get_f32(w->grad, (size_t)OC * C), gb = get_f32(b->grad, OC); /* dW, then dbias */
    g.insert(g.end(), gb.begin(), gb.end());
    trn_model_free(&m);
    return g;
}

static void init(void) {
    if (trn_cuda_init(0) != TRN_OK || trn_cuda_set_precision(TRN_CUDA_BF16) != TRN_OK) {
        printf("cuda init: %s\n", trn_error_reason());
        exit(1);
    }
    G = trn_cuda_backend();
}

int main(void) {
    trn_set_threads(1);
    init();
    /* 1 */
    long long h0 = cuemu::lt_heuristics, d0 = cuemu::lt_descs;
    outputs fused = layer(0);
    long long h1 = cuemu::lt_heuristics, d1 = cuemu::lt_descs;
    layer(0);
    long long h2 = cuemu::lt_heuristics, d2 = cuemu::lt_descs;
    printf("a layer's 6 bf16 matmuls, twice: heuristic queries %lld then %lld, descriptors %lld then %lld, %d plans\n",
           h1 - h0, h2 - h1, d1 - d0, d2 - d1, trn__lt.n);
    CHECK(h1 - h0 == 6 && d1 - d0 == 6 && trn__lt.n == 6, "first time: %lld queries, %lld descriptors, %d plans (6 problems)\n",
          h1 - h0, d1 - d0, trn__lt.n);
    printf("BGRADB: dW vs the plain dW %.2g, dbias vs the column sums %.2g\n", rel(fused.dw2, fused.dw),
           rel(fused.db, fused.db_ref));
    CHECK(rel(fused.dw2, fused.dw) == 0, "BGRADB's dW (beta 0) differs from the plain dW (beta 1 on zeros): %g\n",
          rel(fused.dw2, fused.dw));
    CHECK(rel(fused.db, fused.db_ref) <= 1e-6, "BGRADB's dbias differs from the column sums of dout: %g\n",
          rel(fused.db, fused.db_ref));

    CHECK(h2 == h1 && d2 == d1, "second time: %lld queries, %lld descriptors\n", h2 - h1, d2 - d1);
    /* 2 */
    outputs off = layer(8);
    printf("D 8 bytes off: %d plans, harness errors %ld\n", trn__lt.n, cuemu::errors());
    CHECK(trn__lt.n == 7 && cuemu::errors() == 0, "an 8-byte aligned D: %d plans, %ld harness errors\n", trn__lt.n,
          cuemu::errors());
    CHECK(rel(off.out, fused.out) == 0, "the 8-byte aligned output differs: %g\n", rel(off.out, fused.out));
    {   /* what the kit's plans avoid: an algorithm chosen for cuBLASLt's default 256 bytes, run on that pointer */
        cublasLtMatmulDesc_t op;
        cublasLtMatrixLayout_t la, lb, ld;
        cublasLtMatmulPreference_t pref;
        cublasLtMatmulHeuristicResult_t res;
        int found = 0;
        float one = 1, zero = 0;
        char *a = (char *)G->alloc(2 * 64 + 64, TRN_KIND_TEMP), *d = (char *)G->alloc(4 * 64 + 64, TRN_KIND_TEMP);
        G->zero(a, 2 * 64 + 64);
        cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
        cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, 8, 8, 8);
        cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, 8, 8, 8);
        cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, 8, 8, 8);
        cublasLtMatmulPreferenceCreate(&pref);
        cublasLtMatmulAlgoGetHeuristic(trn__cu.cublaslt, op, la, lb, ld, ld, pref, 1, &res, &found);
        long e0 = cuemu::errors();
        cublasStatus_t st = cublasLtMatmul(trn__cu.cublaslt, op, &one, a, la, a, lb, &zero, d + 8, ld, d + 8, ld,
                                           &res.algo, NULL, 0, NULL);
        CHECK(found == 1 && st == CUBLAS_STATUS_INVALID_VALUE && cuemu::errors() == e0 + 1,
              "a D 8 bytes off, under an algorithm chosen for 256: status %d, errors %ld\n", (int)st, cuemu::errors() - e0);
        cuemu::S().errors = e0; /* that one was wanted */
        cublasLtMatmulPreferenceDestroy(pref);
        cublasLtMatrixLayoutDestroy(ld); cublasLtMatrixLayoutDestroy(lb); cublasLtMatrixLayoutDestroy(la);
        cublasLtMatmulDescDestroy(op);
        G->free(a); G->free(d);
    }
    /* 3 */
    trn_cuda_shutdown();
    CHECK(trn__lt.n == 0, "shutdown keeps %d plans\n", trn__lt.n);
    cuemu::lt_no_algo = 1;
    init();
    long long g0 = cuemu::gemms, m0 = cuemu::lt_matmuls;
    outputs un = layer(0);
    printf("no algorithm: %d plans, %lld cublasGemmEx, %lld cublasLtMatmul; relative differences from the fused: "
           "out %.2g, gelu %.2g, pre %.2g, dpre %.2g, dinp %.2g, dw %.2g, BGRADB dw %.2g, dbias %.2g\n", trn__lt.n,
           cuemu::gemms - g0, cuemu::lt_matmuls - m0, rel(un.out, fused.out), rel(un.outg, fused.outg),
           rel(un.pre, fused.pre), rel(un.dpre, fused.dpre), rel(un.dinp, fused.dinp), rel(un.dw, fused.dw),
           rel(un.dw2, fused.dw2), rel(un.db, fused.db));
    CHECK(trn__lt.noted == 1 && cuemu::lt_matmuls == m0 && cuemu::gemms - g0 == 6, "the unfused path: noted %d, %lld "
          "cuBLASLt calls, %lld cublasGemmEx (want 0 and 6)\n", trn__lt.noted, cuemu::lt_matmuls - m0, cuemu::gemms - g0);
    CHECK(rel(un.dw2, fused.dw2) <= 1e-6 && rel(un.db, un.db_ref) <= 1e-6,
          "unfused BGRADB: dW %g, dbias %g from the column sums\n", rel(un.dw2, fused.dw2), rel(un.db, un.db_ref));
    /* one extra bf16 rounding (2^-8 relative) before the epilogue; GELU' can magnify it a little */
    CHECK(rel(un.out, fused.out) <= 1.0 / 128 && rel(un.outg, fused.outg) <= 1.0 / 128 &&
              rel(un.pre, fused.pre) <= 1.0 / 128 && rel(un.dpre, fused.dpre) <= 1.0 / 64 &&
              rel(un.dinp, fused.dinp) == 0 && rel(un.dw, fused.dw) <= 1e-6,
          "the unfused results differ from the fused ones\n");
    /* and the check can fail: the fused output against the bias-less one */
    vec nobias = fused.out;
    CHECK(rel(un.pre, fused.out) <= 1.0 / 128 && rel(un.outg, nobias) > 0.05, "the tolerance cannot tell GELU from none\n");
    CHECK(cuemu::errors() == 0, "the harness reported %ld errors\n", cuemu::errors());
    cuemu::lt_no_algo = 0;
    trn_cuda_shutdown();
    /* 4 */
    init();
    vec one = accumulated(1), two = accumulated(2);
    vec db1(one.end() - OC, one.end()), db2(two.end() - OC, two.end());
    printf("a linear layer, 2 micro-batches vs 1 batch (bf16): dW %.2g, dbias %.2g relative\n", rel(two, one),
           rel(db2, db1));
    CHECK(rel(two, one) <= 1.0 / 128 && rel(db2, db1) <= 1.0 / 128,
          "2 micro-batches: dW, dbias off by %.3g, %.3g relative (the second must add, not write)\n", rel(two, one),
          rel(db2, db1));
    CHECK(rel(db1, vec(OC, 0.0f)) > 1e-3, "dbias is %g at most: the check is blind\n", rel(db1, vec(OC, 0.0f)));
    CHECK(cuemu::errors() == 0, "the harness reported %ld errors\n", cuemu::errors());
    trn_cuda_shutdown();
    return check_summary();
}
