// build: -O1 -g1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined -Wno-maybe-uninitialized
/* tests/test_cuda_ops_shape_loss.cpp - the >>ops3 kernels of train_cuda.h against the
   CPU backend, run on the CPU by tests/cuda_on_cpu.h (tests/test_cuda_ops_shape_loss_gpu.cu
   is the same file for nvcc and a real GPU): dropout (the same mask bits),
   transpose, slice, concat, sum/mean, batched matmul (all four transposes),
   cross-entropy with ignored rows and label smoothing, BCE with logits, L1,
   Huber; forward outputs and backward accumulations (every gradient starts
   from nonzero values: backward must add). Then a small graph of these ops
   on the tape (dropout, reshape, transpose, bmm, slice, concat, losses) on
   both backends: the same loss and gradients.
   Odd shapes (nothing a multiple of a block or warp). Tolerances: 0 for
   copies and masks, 1e-5 for elementwise math and sums of O(1) values,
   2e-5 for the GEMMs. */
#define TRN_CUDA_FLASH_HS(X) /* no bf16 attention here: its kernels are not compiled (train_cuda.h) */
#define TRAIN_IMPLEMENTATION
#include "train.h"
#include "extras/train_ops.h"
#ifndef __CUDACC__
#include "tests/cuda_on_cpu.h"
#endif
#define TRAIN_CUDA_IMPLEMENTATION
#include "train_cuda.h"
#include "tests/check.h"

#include <string.h>
#include <vector>

#include "tests/cuda_fixtures.h" // vec, GPU, CPU, RNG, randn, dbuf, maxdiff
static void report(const char *name, double diff, double tol, long e0) {
    CHECK(diff <= tol, "%s: max|cuda-cpu| = %.3g > tol %.3g\n", name, diff, tol);
    CHECK(harness_errors() == e0, "%s: the harness reported %ld errors\n", name, harness_errors() - e0);
    printf("ok - %-36s max|cuda-cpu| %.3g (tol %.0g)\n", name, diff, tol);
}

static void test_dropout(size_t n) {
    long e0 = harness_errors();
    vec x = randn(n), out(n), g = randn(n), dx0 = randn(n), dx = dx0;
    uint64_t key = 0x123456789abcdefull;
    trn_dropout_forward(out.data(), x.data(), n, 0.37f, key);
    trn_dropout_backward(dx.data(), g.data(), n, 0.37f, key);
    dbuf dxi(x), dout(NULL, n * 4), dg(g), ddx(dx0);
    GPU->dropout_forward(dout.f(), dxi.f(), n, 0.37f, key);
    GPU->dropout_backward(ddx.f(), dg.f(), n, 0.37f, key);
    /* the same mask gives the same zeros; the kept values x / (1-p) may
       round differently on a real GPU (4.8e-7 seen on an H100, 2026-11-25),
       while a different mask would be off by O(1) */
    report("dropout (same mask, fwd+bwd)", fmax(maxdiff(dout.get(), out), maxdiff(ddx.get(), dx)), 1e-6, e0);
}

static void test_transpose(int A, int D0, int Bm, int D1, int C) {
    long e0 = harness_errors();
    size_t n = (size_t)A * D0 * Bm * D1 * C;
    vec x = randn(n), out(n), g = randn(n), dx0 = randn(n), dx = dx0;
    trn_transpose_forward(out.data(), x.data(), A, D0, Bm, D1, C);
    trn_transpose_backward(dx.data(), g.data(), A, D0, Bm, D1, C);
    dbuf dxi(x), dout(NULL, n * 4), dg(g), ddx(dx0);
    GPU->transpose_forward(dout.f(), dxi.f(), A, D0, Bm, D1, C);
    GPU->transpose_backward(ddx.f(), dg.f(), A, D0, Bm, D1, C);
    char name[64];
    snprintf(name, sizeof name, "transpose (%d,%d,%d,%d,%d)", A, D0, Bm, D1, C);
    report(name, fmax(maxdiff(dout.get(), out), maxdiff(ddx.get(), dx)), 1e-6, e0);
}

static void test_slice_concat(int N, int Ca, int Cb) {
    long e0 = harness_errors();
    int C = Ca + Cb, start = 3, len = Ca - 4;
    vec x = randn((size_t)N * C), out((size_t)N * len), g = randn((size_t)N * len), dx0 = randn((size_t)N * C), dx = dx0;
    trn_slice_forward(out.data(), x.data(), N, C, start, len);
    trn_slice_backward(dx.data(), g.data(), N, C, start, len);
    dbuf dxi(x), dout(NULL, out.size() * 4), dg(g), ddx(dx0);
    GPU->slice_forward(dout.f(), dxi.f(), N, C, start, len);
    GPU->slice_backward(ddx.f(), dg.f(), N, C, start, len);
    report("slice", fmax(maxdiff(dout.get(), out), maxdiff(ddx.get(), dx)), 1e-6, e0);
    vec a = randn((size_t)N * Ca), b = randn((size_t)N * Cb), cat((size_t)N * C), gc = randn((size_t)N * C);
    vec da0 = randn(a.size()), db0 = randn(b.size()), da = da0, db = db0;
    trn_concat_forward(cat.data(), a.data(), b.data(), N, Ca, Cb);
    trn_concat_backward(da.data(), db.data(), gc.data(), N, Ca, Cb);
    dbuf xa(a), xb(b), dcat(NULL, cat.size() * 4), dgc(gc), dda(da0), ddb(db0);
    GPU->concat_forward(dcat.f(), xa.f(), xb.f(), N, Ca, Cb);
    GPU->concat_backward(dda.f(), ddb.f(), dgc.f(), N, Ca, Cb);
    report("concat", fmax(maxdiff(dcat.get(), cat), fmax(maxdiff(dda.get(), da), maxdiff(ddb.get(), db))), 1e-6, e0);
}

static void test_sum(int N, size_t C, float scale) {
    long e0 = harness_errors();
    vec x = randn((size_t)N * C), out((size_t)N), g = randn((size_t)N), dx0 = randn(x.size()), dx = dx0;
    trn_sum_forward(out.data(), x.data(), N, C, scale);
    trn_sum_backward(dx.data(), g.data(), N, C, scale);
    dbuf dxi(x), dout(NULL, out.size() * 4), dg(g), ddx(dx0);
    GPU->sum_forward(dout.f(), dxi.f(), N, C, scale);
    GPU->sum_backward(ddx.f(), dg.f(), N, C, scale);
    char name[64];
    snprintf(name, sizeof name, "sum (N=%d, C=%zu, scale %.3g)", N, C, scale);
    report(name, fmax(maxdiff(dout.get(), out), maxdiff(ddx.get(), dx)), 1e-5, e0);
}

static void test_bmm(int Bt, int M, int N, int K, int ta, int tb) {
    long e0 = harness_errors();
    vec a = randn((size_t)Bt * M * K, 0.5f), b = randn((size_t)Bt * K * N, 0.5f), out((size_t)Bt * M * N);
    vec g = randn(out.size()), da0 = randn(a.size()), db0 = randn(b.size()), da = da0, db = db0;
    trn_bmm_forward(out.data(), a.data(), b.data(), Bt, M, N, K, ta, tb);
    trn_bmm_backward(da.data(), db.data(), g.data(), a.data(), b.data(), Bt, M, N, K, ta, tb);
    dbuf xa(a), xb(b), dout(NULL, out.size() * 4), dg(g), dda(da0), ddb(db0);
    GPU->bmm_forward(dout.f(), xa.f(), xb.f(), Bt, M, N, K, ta, tb);
    GPU->bmm_backward(dda.f(), ddb.f(), dg.f(), xa.f(), xb.f(), Bt, M, N, K, ta, tb);
    char name[64];
    snprintf(name, sizeof name, "bmm (ta %d, tb %d)", ta, tb);
    report(name, fmax(maxdiff(dout.get(), out), fmax(maxdiff(dda.get(), da), maxdiff(ddb.get(), db))), 2e-5, e0);
}

static void test_xent_ex(int N, int V, int Vp, float smoothing) {
    long e0 = harness_errors();
    vec l = randn((size_t)N * Vp, 2.0f), losses((size_t)N), lse((size_t)N), dl0 = randn(l.size()), dl = dl0;
    std::vector<int> t((size_t)N);
    for (int i = 0; i < N; i++) t[(size_t)i] = i % 5 == 2 ? -1 : (int)trn_rng_below(&RNG, (uint32_t)V);
    trn_crossentropy_ex_forward(losses.data(), lse.data(), l.data(), t.data(), N, V, Vp, smoothing);
    trn_crossentropy_ex_backward(dl.data(), l.data(), lse.data(), t.data(), 0.07f, N, V, Vp, smoothing);
    dbuf dlog(l), dlosses(NULL, losses.size() * 4), dlse(NULL, lse.size() * 4), dt(t.data(), t.size() * 4), ddl(dl0);
    GPU->crossentropy_ex_forward(dlosses.f(), dlse.f(), dlog.f(), dt.i(), N, V, Vp, smoothing);
    GPU->crossentropy_ex_backward(ddl.f(), dlog.f(), dlse.f(), dt.i(), 0.07f, N, V, Vp, smoothing);
    char name[64];
    snprintf(name, sizeof name, "cross_entropy_ex (V=%d, smoothing %.2g)", V, smoothing);
    report(name, fmax(fmax(maxdiff(dlosses.get(), losses), maxdiff(dlse.get(), lse)), maxdiff(ddl.get(), dl)), 1e-5, e0);
}

static void test_pointwise_losses(size_t n) {
    long e0 = harness_errors();
    vec x = randn(n, 3.0f), y = randn(n), y01(n), lc(n), g0 = randn(n);
    for (size_t i = 0; i < n; i++) y01[i] = trn_rng_uniform(&RNG);
    dbuf dx(x), dy(y), dy01(y01), dl(NULL, n * 4);
    const char *names[3] = {"bce_with_logits", "l1", "huber (delta 0.8)"};
    for (int k = 0; k < 3; k++) {
        vec gc = g0;
        dbuf dg(g0);
        if (k == 0) {
            trn_bce_logits_forward(lc.data(), x.data(), y01.data(), n);
            trn_bce_logits_backward(gc.data(), x.data(), y01.data(), 0.3f, n);
            GPU->bce_logits_forward(dl.f(), dx.f(), dy01.f(), n);
            GPU->bce_logits_backward(dg.f(), dx.f(), dy01.f(), 0.3f, n);
        } else if (k == 1) {
            trn_l1_forward(lc.data(), x.data(), y.data(), n);
            trn_l1_backward(gc.data(), x.data(), y.data(), 0.3f, n);
            GPU->l1_forward(dl.f(), dx.f(), dy.f(), n);
            GPU->l1_backward(dg.f(), dx.f(), dy.f(), 0.3f, n);
        } else {
            trn_huber_forward(lc.data(), x.data(), y.data(), 0.8f, n);
            trn_huber_backward(gc.data(), x.data(), y.data(), 0.8f, 0.3f, n);
            GPU->huber_forward(dl.f(), dx.f(), dy.f(), 0.8f, n);
            GPU->huber_backward(dg.f(), dx.f(), dy.f(), 0.8f, 0.3f, n);
        }
        report(names[k], fmax(maxdiff(dl.get(), lc), maxdiff(dg.get(), gc)), 1e-5, e0);
    }
}

/* ---- the ops on the tape, both backends --------------------------------- */
struct net { trn_model m; trn_tensor *x, *w; };
static void net_make(net *n, const trn_backend *be) {
    trn_rng r;
    static const int sx[3] = {2, 5, 12}, sw[3] = {2, 4, 6};
    trn_model_init(&n->m, be);
    n->x = trn_param(&n->m, "x", 3, sx);
    n->w = trn_param(&n->m, "w", 3, sw);
    trn_model_alloc(&n->m);
    trn_rng_seed(&r, 3);
    trn_init_normal(&n->m, n->x, 0.0f, 1.0f, &r);
    trn_init_normal(&n->m, n->w, 0.0f, 1.0f, &r);
    trn_rng_seed(&n->m.rng, 17);
}
static const int TG[10] = {1, 3, -1, 0, 2, 2, -1, 3, 1, 0};
static const float T01[40] = {0.5f, 1, 0, 0.25f, 1, 1, 0, 0, 0.75f, 0.1f, 0.3f, 0.9f, 0, 1, 0.5f, 0.6f, 0.2f, 1, 0, 0.4f,
                              0.5f, 1, 0, 0.25f, 1, 1, 0, 0, 0.75f, 0.1f, 0.3f, 0.9f, 0, 1, 0.5f, 0.6f, 0.2f, 1, 0, 0.4f};
static float net_loss(net *n) {
    trn_model *m = &n->m;
    trn_tensor *h = trn_dropout(m, n->x, 0.25f);                      /* (2,5,12) */
    trn_tensor *a = trn_slice(m, h, 0, 6), *b = trn_slice(m, h, 6, 6); /* (2,5,6) each */
    trn_tensor *p = trn_bmm(m, a, n->w, 0, 1);                         /* (2,5,4) */
    trn_tensor *q = trn_transpose(m, trn_bmm(m, b, n->w, 0, 1), 1, 2); /* (2,4,5) */
    trn_tensor *logits = trn_concat(m, p, trn_transpose(m, q, 1, 2)); /* (2,5,8) */
    trn_tensor *l1 = trn_cross_entropy_ex(m, logits, TG, 4, -1, 0.1f);
    static const int s40[1] = {40};
    trn_tensor *flat = trn_reshape(m, p, 1, s40);
    trn_tensor *l2 = trn_bce_with_logits(m, flat, T01);
    trn_tensor *l3 = trn_huber(m, flat, T01, 0.5f), *l4 = trn_l1(m, trn_mean(m, logits), T01);
    trn_tensor *loss = trn_add(m, trn_add(m, l1, l2), trn_add(m, l3, trn_sum_all(m, trn_mean_all(m, l4))));
    trn_backward(m, loss);
    return trn_item(m, loss);
}
static void test_graph(void) {
    long e0 = harness_errors();
    net c, g;
    net_make(&c, CPU);
    net_make(&g, GPU);
    trn_reset(&c.m); trn_reset(&g.m);
    float lc = net_loss(&c), lg = net_loss(&g);
    vec gc(c.m.grad_data, c.m.grad_data + c.m.n_floats), gg(c.m.n_floats);
    GPU->download(gg.data(), g.m.grad_data, gg.size() * 4);
    CHECK(fabs((double)lc - lg) <= 1e-5, "graph loss cpu %.9g cuda %.9g\n", lc, lg);
    report("graph of ops3 on the tape (grads)", maxdiff(gg, gc), 1e-5, e0);
    trn_model_free(&c.m); trn_model_free(&g.m);
}

int main(void) {
    trn_rng_seed(&RNG, 1);
    trn_set_threads(1);
    trn_cuda_set_tf32(0);
    if (trn_cuda_init(0) != TRN_OK) {
        printf("no CUDA device (%s): nothing to test\n", trn_error_reason());
        return check_summary();
    }
    CPU = trn_cpu_backend();
    GPU = trn_cuda_backend();
    test_dropout(1001);
    test_transpose(2, 3, 5, 7, 3);
    test_transpose(1, 13, 1, 11, 1);
    test_slice_concat(7, 11, 5);
    test_sum(9, 37, 1.0f);
    test_sum(1, 3001, 1.0f / 3001.0f);
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) test_bmm(3, 7, 5, 9, ta, tb);
    test_xent_ex(13, 37, 40, 0.0f);
    test_xent_ex(13, 37, 40, 0.15f);
    test_xent_ex(7, 41, 43, 0.15f); /* rows off 16-byte boundaries: head, packs, tail */
    test_pointwise_losses(1001);
    test_graph();
    trn_cuda_shutdown();
    return check_summary();
}
