// build: -O1 -g1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined -Wno-maybe-uninitialized
/* tests/test_cuda_kernels.cpp - every kernel of train_cuda.h against the CPU
   backend of train.h, and 10 training steps of a small GPT through both.

   Built by g++ with tests/cuda_on_cpu.h, the kernels run on the CPU: each
   block's threads as fibers in a random order between barriers, cuBLAS as a
   reference GEMM, device memory as host memory under AddressSanitizer (see
   the build line). The same source compiled by nvcc (tests/test_cuda_gpu.cu)
   runs the same checks on a real GPU.

   Shapes are odd on purpose (37 rows, 53 channels, T=13 and 40, a vocabulary
   of 67 padded to 72): nothing is a multiple of a block or warp size.
   For each kernel it prints the largest |cuda - cpu| seen. TF32 is off for
   the kernel checks (fp32 GEMMs match to rounding); one check turns it on.
   Tolerances allow for a GPU's different summation order, FMA contraction
   and math library (expf, tanhf differ by an ulp or two): 0 for copies,
   1e-5 for elementwise math and reductions of O(1) values, 2e-5..1e-4 for
   GEMMs and layernorm backward (sums over 50..300 terms).

   Run:  tests/bin/test_cuda_kernels [--seed N]     (CUEMU_SEED=n picks the
         thread order of the harness)
*/
#define TRN_CUDA_FLASH_HS(X) /* no bf16 attention here: its kernels are not compiled (train_cuda.h) */
#define TRAIN_IMPLEMENTATION
#include "train.h"
#ifndef __CUDACC__
#include "tests/cuda_on_cpu.h"
#endif
#define TRAIN_CUDA_IMPLEMENTATION
#include "train_cuda.h"
#include "tests/check.h"

#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#include "tests/cuda_fixtures.h" // vec, GPU, CPU, RNG, randn, dbuf, maxdiff

/* one line per kernel; the table at the end repeats them */
struct result { char name[48]; double diff, tol; };
static std::vector<result> results;
static void report(const char *name, double diff, double tol, long err0) {
    result r;
    snprintf(r.name, sizeof r.name, "%s", name);
    r.diff = diff;
    r.tol = tol;
    results.push_back(r);
    CHECK(diff <= tol, "%s: max|cuda-cpu| = %.3g > tol %.3g\n", name, diff, tol);
    CHECK(harness_errors() == err0, "%s: the harness reported %ld errors\n", name, harness_errors() - err0);
}

/* ---------------------------------------------------------------- kernels */
static void test_matmul(int N, int C, int OC, int with_bias, double tol, const char *label) {
    long e0 = harness_errors();
    vec inp = randn((size_t)N * C), w = randn((size_t)OC * C, 0.3f), bias = randn((size_t)OC);
    vec out_c((size_t)N * OC);
    trn_matmul_forward(out_c.data(), inp.data(), w.data(), with_bias ? bias.data() : NULL, N, C, OC);
    dbuf di(inp), dw(w), db(bias), dout(NULL, out_c.size() * sizeof(float));
    GPU->matmul_forward(dout.f(), di.f(), dw.f(), with_bias ? db.f() : NULL, N, C, OC);
    char name[48];
    snprintf(name, sizeof name, "matmul_forward%s", label);
    report(name, maxdiff(dout.get(), out_c), tol, e0);

    /* backward accumulates: start every gradient from nonzero values */
    vec g = randn((size_t)N * OC), dinp0 = randn((size_t)N * C), dw0 = randn((size_t)OC * C), db0 = randn((size_t)OC);
    vec dinp_c = dinp0, dw_c = dw0, db_c = db0;
    trn_matmul_backward(dinp_c.data(), dw_c.data(), with_bias ? db_c.data() : NULL, g.data(), inp.data(), w.data(), N,
                        C, OC);
    dbuf dg(g), ddi(dinp0), ddw(dw0), ddb(db0);
    GPU->matmul_backward(ddi.f(), ddw.f(), with_bias ? ddb.f() : NULL, dg.f(), di.f(), dw.f(), N, C, OC);
    double d = maxdiff(ddi.get(), dinp_c);
    d = fmax(d, maxdiff(ddw.get(), dw_c));
    d = fmax(d, maxdiff(ddb.get(), db_c));
    snprintf(name, sizeof name, "matmul_backward%s", label);
    report(name, d, tol, e0);
    /* NULL outputs are skipped */
    GPU->matmul_backward(NULL, NULL, NULL, dg.f(), di.f(), dw.f(), N, C, OC);
    CHECK(maxdiff(ddi.get(), dinp_c) <= tol, "matmul_backward with NULL outputs changed something\n");
    /* _ex writes (beta 0) what it is told is fresh: buffers of NaN come
       out as the product alone; the bias still accumulates */
    vec nan_i((size_t)N * C, NAN), nan_w((size_t)OC * C, NAN), zi((size_t)N * C, 0.0f), zw((size_t)OC * C, 0.0f);
    vec wi_c = zi, ww_c = zw, wb_c = db0;
    trn_matmul_backward(wi_c.data(), ww_c.data(), with_bias ? wb_c.data() : NULL, g.data(), inp.data(), w.data(), N, C,
                        OC);
    dbuf xi(nan_i), xw(nan_w), xb(db0);
    GPU->matmul_backward_ex(xi.f(), xw.f(), with_bias ? xb.f() : NULL, dg.f(), di.f(), dw.f(), N, C, OC, 1, 1, 0);
    d = fmax(maxdiff(xi.get(), wi_c), maxdiff(xw.get(), ww_c));
    d = fmax(d, maxdiff(xb.get(), wb_c));
    snprintf(name, sizeof name, "matmul_backward_ex (written)%s", label);
    report(name, d, tol, e0);
    dbuf yi(dinp0), yw(dw0); /* write dinp, accumulate dw */
    GPU->matmul_backward_ex(yi.f(), yw.f(), NULL, dg.f(), di.f(), dw.f(), N, C, OC, 1, 0, 0);
    d = fmax(maxdiff(yi.get(), wi_c), maxdiff(yw.get(), dw_c));
    snprintf(name, sizeof name, "matmul_backward_ex (mixed)%s", label);
    report(name, d, tol, e0);
}

static void test_embedding(int N, int C, int V) {
    long e0 = harness_errors();
    std::vector<int> ids((size_t)N);
    for (int i = 0; i < N; i++) ids[(size_t)i] = (int)trn_rng_below(&RNG, (uint32_t)V);
    ids[0] = ids[1] = 3; /* repeated ids add into one row */
    vec table = randn((size_t)V * C), out_c((size_t)N * C);
    trn_embedding_forward(out_c.data(), ids.data(), table.data(), N, C);
    dbuf dids(ids.data(), ids.size() * sizeof(int)), dt(table), dout(NULL, out_c.size() * sizeof(float));
    GPU->embedding_forward(dout.f(), dids.i(), dt.f(), N, C);
    report("embedding_forward", maxdiff(dout.get(), out_c), 0.0, e0);
    vec g = randn((size_t)N * C), dt0 = randn((size_t)V * C), dt_c = dt0;
    trn_embedding_backward(dt_c.data(), g.data(), ids.data(), N, C);
    dbuf dg(g), ddt(dt0);
    GPU->embedding_backward(ddt.f(), dg.f(), dids.i(), N, C);
    report("embedding_backward", maxdiff(ddt.get(), dt_c), 1e-5, e0);
}

static void test_layernorm(int N, int C) {
    long e0 = harness_errors();
    vec inp = randn((size_t)N * C, 2.0f), w = randn((size_t)C), b = randn((size_t)C);
    for (size_t i = 0; i < inp.size(); i++) inp[i] += 0.5f; /* a nonzero mean */
    vec out_c((size_t)N * C), mean_c((size_t)N), rstd_c((size_t)N);
    trn_layernorm_forward(out_c.data(), mean_c.data(), rstd_c.data(), inp.data(), w.data(), b.data(), N, C);
    dbuf di(inp), dw(w), db(b), dout(NULL, out_c.size() * 4), dm(NULL, (size_t)N * 4), dr(NULL, (size_t)N * 4);
    GPU->layernorm_forward(dout.f(), dm.f(), dr.f(), di.f(), dw.f(), db.f(), N, C);
    double d = maxdiff(dout.get(), out_c);
    d = fmax(d, maxdiff(dm.get(), mean_c));
    d = fmax(d, maxdiff(dr.get(), rstd_c));
    char name[48];
    snprintf(name, sizeof name, "layernorm_forward C=%d", C);
    report(name, d, 2e-5, e0);
    vec g = randn((size_t)N * C), dx0 = randn((size_t)N * C), dw0 = randn((size_t)C), db0 = randn((size_t)C);
    vec dx_c = dx0, dw_c = dw0, db_c = db0;
    trn_layernorm_backward(dx_c.data(), dw_c.data(), db_c.data(), g.data(), inp.data(), w.data(), mean_c.data(),
                           rstd_c.data(), N, C);
    dbuf dg(g), ddx(dx0), ddw(dw0), ddb(db0);
    GPU->layernorm_backward(ddx.f(), ddw.f(), ddb.f(), dg.f(), di.f(), dw.f(), dm.f(), dr.f(), N, C);
    d = maxdiff(ddx.get(), dx_c);
    d = fmax(d, maxdiff(ddw.get(), dw_c));
    d = fmax(d, maxdiff(ddb.get(), db_c));
    snprintf(name, sizeof name, "layernorm_backward C=%d", C);
    /* dw, db: sums of N terms of size ~1 in fp32, the CPU's in one running
       sum: its rounding grows with N (0.000575 at N = 8300) */
    double tol = 1e-4 * fmax(1.0, N / 300.0);
    report(name, d, tol, e0);
    /* layernorm_backward_ex: dinp WRITTEN (it starts as NaN: a read shows)
       and copied to dinp2 (>>addln), against the reference from dx = 0 */
    vec zx_c((size_t)N * C, 0.0f), zw_c = dw0, zb_c = db0;
    trn_layernorm_backward(zx_c.data(), zw_c.data(), zb_c.data(), g.data(), inp.data(), w.data(), mean_c.data(),
                           rstd_c.data(), N, C);
    dbuf wx(vec((size_t)N * C, NAN)), wx2(randn((size_t)N * C)), ww(dw0), wb(db0);
    GPU->layernorm_backward_ex(wx.f(), wx2.f(), ww.f(), wb.f(), dg.f(), di.f(), dw.f(), dm.f(), dr.f(), N, C, 1);
    vec got = wx.get();
    d = fmax(maxdiff(got, zx_c), maxdiff(ww.get(), zw_c));
    d = fmax(d, maxdiff(wb.get(), zb_c));
    d = fmax(d, maxdiff(wx2.get(), got)); /* dinp2: dinp's bits */
    snprintf(name, sizeof name, "ln_backward_ex N=%d C=%d write+dinp2", N, C);
    report(name, d, tol, e0);
    /* dinp NULL: only dw, db (added to dw0, db0); then dw NULL: only db */
    dbuf nw(dw0), nb(db0), nb2(db0);
    GPU->layernorm_backward_ex(NULL, NULL, nw.f(), nb.f(), dg.f(), di.f(), dw.f(), dm.f(), dr.f(), N, C, 0);
    GPU->layernorm_backward_ex(NULL, NULL, NULL, nb2.f(), dg.f(), di.f(), dw.f(), dm.f(), dr.f(), N, C, 0);
    d = fmax(maxdiff(nw.get(), dw_c), maxdiff(nb.get(), db_c));
    d = fmax(d, maxdiff(nb2.get(), db_c));
    snprintf(name, sizeof name, "ln_backward_ex N=%d C=%d dinp NULL", N, C);
    report(name, d, tol, e0);
}

/* the elementwise ops: gelu, relu, add, accumulate, mse, scale */
static void test_elementwise(size_t n) {
    long e0 = harness_errors();
    vec x = randn(n, 2.0f), y = randn(n), g = randn(n), d0 = randn(n);
    dbuf dx(x), dy(y), dg(g), dout(NULL, n * 4);
    vec c(n);
    trn_gelu_forward(c.data(), x.data(), n);
    GPU->gelu_forward(dout.f(), dx.f(), n);
    report("gelu_forward", maxdiff(dout.get(), c), 1e-5, e0);
    {
        vec cc = d0;
        dbuf dd(d0);
        trn_gelu_backward(cc.data(), x.data(), g.data(), n);
        GPU->gelu_backward(dd.f(), dx.f(), dg.f(), n);
        report("gelu_backward", maxdiff(dd.get(), cc), 3e-5, e0); /* tanhf ulps, times up to ~5 */
    }
    if (n > 1) { /* one element off a 16-byte boundary: the element-wise path */
        vec c1(n - 1);
        trn_gelu_forward(c1.data(), x.data() + 1, n - 1);
        dbuf o1(NULL, (n - 1) * 4);
        GPU->gelu_forward(o1.f(), dx.f() + 1, n - 1);
        report("gelu_forward (unaligned)", maxdiff(o1.get(), c1), 1e-5, e0);
    }
    trn_relu_forward(c.data(), x.data(), n);
    GPU->relu_forward(dout.f(), dx.f(), n);
    report("relu_forward", maxdiff(dout.get(), c), 0.0, e0);
    {
        vec cc = d0;
        dbuf dd(d0), drelu(c);
        trn_relu_backward(cc.data(), c.data(), g.data(), n);
        GPU->relu_backward(dd.f(), drelu.f(), dg.f(), n);
        report("relu_backward", maxdiff(dd.get(), cc), 0.0, e0);
    }
    trn_add_forward(c.data(), x.data(), y.data(), n);
    GPU->add_forward(dout.f(), dx.f(), dy.f(), n);
    report("add_forward", maxdiff(dout.get(), c), 0.0, e0);
    {
        vec cc = d0;
        dbuf dd(d0);
        trn_accumulate(cc.data(), g.data(), n);
        GPU->accumulate(dd.f(), dg.f(), n);
        report("accumulate (add backward)", maxdiff(dd.get(), cc), 0.0, e0);
    }
    trn_mse_forward(c.data(), x.data(), y.data(), n);
    GPU->mse_forward(dout.f(), dx.f(), dy.f(), n);
    report("mse_forward", maxdiff(dout.get(), c), 1e-5, e0);
    {
        vec cc = d0;
        dbuf dd(d0);
        trn_mse_backward(cc.data(), x.data(), y.data(), 1.0f / (float)n, n);
        GPU->mse_backward(dd.f(), dx.f(), dy.f(), 1.0f / (float)n, n);
        report("mse_backward", maxdiff(dd.get(), cc), 1e-6, e0);
    }
    {
        vec cc = x;
        dbuf dd(x);
        trn_scale(cc.data(), 0.37f, n);
        GPU->scale(dd.f(), 0.37f, n);
        report("scale", maxdiff(dd.get(), cc), 0.0, e0);
    }
    {
        double sc = trn_sum_squares(x.data(), n), sg = GPU->sum_squares(dx.f(), n);
        report("sum_squares (relative)", fabs(sc - sg) / sc, 1e-12, e0);
    }
}

static void test_attention(int B, int T, int NH, int NKV, int hs, int causal) {
    long e0 = harness_errors();
    size_t nq = (size_t)B * T * (NH + 2 * NKV) * hs, no = (size_t)B * T * NH * hs, na = (size_t)B * NH * T * T;
    vec qkv = randn(nq), out_c(no), att_c(na);
    trn_attention_forward(out_c.data(), att_c.data(), qkv.data(), B, T, NH, NKV, hs, causal);
    dbuf dq(qkv), dout(NULL, no * 4), datt(NULL, na * 4);
    GPU->attention_forward(dout.f(), datt.f(), dq.f(), B, T, NH, NKV, hs, causal);
    char name[64], shape[32];
    snprintf(shape, sizeof shape, "%s T=%d %d/%d", causal ? "causal" : "full", T, NH, NKV);
    snprintf(name, sizeof name, "attention_forward %s", shape);
    report(name, fmax(maxdiff(dout.get(), out_c), maxdiff(datt.get(), att_c)), 1e-5, e0);
    vec g = randn(no), dqkv0 = randn(nq), dqkv_c = dqkv0, scratch_c(na);
    trn_attention_backward(dqkv_c.data(), scratch_c.data(), g.data(), qkv.data(), att_c.data(), B, T, NH, NKV, hs,
                           causal);
    dbuf dg(g), ddq(dqkv0), dscr(NULL, na * 4);
    GPU->attention_backward(ddq.f(), dscr.f(), dg.f(), dq.f(), datt.f(), B, T, NH, NKV, hs, causal);
    snprintf(name, sizeof name, "attention_backward %s", shape);
    report(name, maxdiff(ddq.get(), dqkv_c), 1e-5, e0);

    /* the fused kernels: against the CPU's fused pair and the reference */
    vec fout_c(no), lse_c((size_t)B * NH * T), fdqkv_c = dqkv0;
    trn_flash_attention_forward(fout_c.data(), lse_c.data(), qkv.data(), B, T, NH, NKV, hs, causal);
    dbuf fout(NULL, no * 4), flse(NULL, lse_c.size() * 4);
    GPU->flash_attention_forward(fout.f(), flse.f(), dq.f(), B, T, NH, NKV, hs, causal);
    vec fo = fout.get();
    snprintf(name, sizeof name, "flash_attention_forward %s", shape);
    report(name, fmax(maxdiff(fo, fout_c), maxdiff(flse.get(), lse_c)), 1e-5, e0);
    snprintf(name, sizeof name, "  the same vs the reference");
    report(name, maxdiff(fo, out_c), 1e-5, e0);
    trn_flash_attention_backward(fdqkv_c.data(), g.data(), qkv.data(), fout_c.data(), lse_c.data(), B, T, NH, NKV,
                                 hs, causal);
    dbuf fddq(dqkv0);
    GPU->flash_attention_backward(fddq.f(), dg.f(), dq.f(), fout.f(), flse.f(), B, T, NH, NKV, hs, causal);
    vec fd = fddq.get();
    snprintf(name, sizeof name, "flash_attention_backward %s", shape);
    report(name, maxdiff(fd, fdqkv_c), 2e-5, e0);
    snprintf(name, sizeof name, "  the same vs the reference");
    report(name, maxdiff(fd, dqkv_c), 2e-5, e0);
}

/* tol: the losses' absolute tolerance. The device sums the row's exps in
   another order than the CPU: a few float32 ulps of the log-sum-exp, which
   at V = 128,256 (logits ~ 3 N(0,1): lse ~ 16, ulp 1.9e-6) is ~4 ulps,
   7.6e-6 and 9.5e-6 seen; 3e-5 there, 1e-5 at the small V's */
static void test_crossentropy(int N, int V, int Vp, double tol) {
    long e0 = harness_errors();
    vec logits = randn((size_t)N * Vp, 3.0f);
    std::vector<int> tg((size_t)N);
    for (int i = 0; i < N; i++) tg[(size_t)i] = (int)trn_rng_below(&RNG, (uint32_t)V);
    tg[0] = V - 1; /* the last real class */
    vec loss_c((size_t)N), lse_c((size_t)N);
    trn_crossentropy_forward(loss_c.data(), lse_c.data(), logits.data(), tg.data(), N, V, Vp);
    dbuf dl(logits), dt(tg.data(), tg.size() * sizeof(int)), dloss(NULL, (size_t)N * 4), dlse(NULL, (size_t)N * 4);
    GPU->crossentropy_forward(dloss.f(), dlse.f(), dl.f(), dt.i(), N, V, Vp);
    char name[48];
    snprintf(name, sizeof name, "crossentropy_forward V=%d", V);
    report(name, fmax(maxdiff(dloss.get(), loss_c), maxdiff(dlse.get(), lse_c)), tol, e0);
    vec d0 = randn((size_t)N * Vp), dc = d0;
    trn_crossentropy_backward(dc.data(), logits.data(), lse_c.data(), tg.data(), 1.0f / (float)N, N, V, Vp);
    dbuf dd(d0);
    GPU->crossentropy_backward(dd.f(), dl.f(), dlse.f(), dt.i(), 1.0f / (float)N, N, V, Vp);
    vec got = dd.get();
    snprintf(name, sizeof name, "crossentropy_backward V=%d", V);
    report(name, maxdiff(got, dc), 1e-5, e0);
    int pad_ok = 1; /* the padding columns are not touched */
    for (int n = 0; n < N; n++)
        for (int v = V; v < Vp; v++) pad_ok &= got[(size_t)n * Vp + v] == d0[(size_t)n * Vp + v];
    CHECK(pad_ok, "crossentropy_backward wrote into the padding columns\n");
}

/* the classifier's fused kernel against trn_crossentropy_fused: losses,
   and the gradient written over the logits (padding 0). Vp * 4 bytes not a
   multiple of 16 starts rows off a 16-byte boundary (the scalar head);
   Vp % 4 != 0 leaves a scalar tail; the harness checks every 16-byte
   access for alignment. */
static void test_crossentropy_fused(int N, int V, int Vp, float dloss, double tol) {
    long e0 = harness_errors();
    vec logits = randn((size_t)N * Vp, 3.0f), grad_c = logits, loss_c((size_t)N);
    std::vector<int> tg((size_t)N);
    for (int i = 0; i < N; i++) tg[(size_t)i] = (int)trn_rng_below(&RNG, (uint32_t)V);
    tg[0] = V - 1;            /* the last real column: a pack's, or the tail's when V = Vp */
    if (N > 1) tg[1] = 0;     /* the first: in the head when row 1 starts unaligned */
    if (N > 2) tg[2] = V / 2; /* the body */
    trn_crossentropy_fused(loss_c.data(), grad_c.data(), tg.data(), dloss, N, V, Vp);
    dbuf dl(logits), dt(tg.data(), tg.size() * sizeof(int)), dloss_(NULL, (size_t)N * 4);
    GPU->crossentropy_fused(dloss_.f(), dl.f(), dt.i(), dloss, N, V, Vp);
    char name[48];
    snprintf(name, sizeof name, "crossentropy_fused V=%d Vp=%d", V, Vp);
    report(name, fmax(maxdiff(dloss_.get(), loss_c), maxdiff(dl.get(), grad_c) / dloss), tol, e0);
    /* and the reference is the unfused pair: forward, then backward into zeros */
    vec lse((size_t)N), loss2((size_t)N), d2((size_t)N * Vp, 0.0f);
    trn_crossentropy_forward(loss2.data(), lse.data(), logits.data(), tg.data(), N, V, Vp);
    trn_crossentropy_backward(d2.data(), logits.data(), lse.data(), tg.data(), dloss, N, V, Vp);
    CHECK(maxdiff(loss2, loss_c) <= 1e-6 && maxdiff(d2, grad_c) <= 1e-6 * dloss,
          "trn_crossentropy_fused is not trn_crossentropy_forward + _backward\n");
}

/* the harness's 16-byte alignment check: a pack read and written at a
   16-byte boundary is fine, 4 bytes off is an error (a GPU faults) */
static __global__ void k_ld16_at(float *p, int off) { trn__st16(p + off, trn__ld16(p + off)); }
static void test_align16(void) {
#ifdef TRN_CUDA_ON_CPU
    dbuf b(NULL, 64);
    long e0 = harness_errors();
    TRN_CUDA_LAUNCH(k_ld16_at, dim3(1), dim3(1), 0, 0, b.f(), 4);
    CHECK(harness_errors() == e0, "an aligned 16-byte access was reported\n");
    fprintf(stderr, "(the next two harness errors are expected: the 16-byte alignment check)\n");
    TRN_CUDA_LAUNCH(k_ld16_at, dim3(1), dim3(1), 0, 0, b.f(), 1);
    CHECK(harness_errors() == e0 + 2, "a misaligned 16-byte load and store: %ld harness errors, expected 2\n",
          harness_errors() - e0);
    cuemu::S().errors = e0; /* expected: not the test's failure */
#endif
}

static void test_meanpool(int B, int T, int C) {
    long e0 = harness_errors();
    vec x = randn((size_t)B * T * C), c((size_t)B * C);
    trn_meanpool_forward(c.data(), x.data(), B, T, C);
    dbuf dx(x), dout(NULL, c.size() * 4);
    GPU->meanpool_forward(dout.f(), dx.f(), B, T, C);
    report("meanpool_forward", maxdiff(dout.get(), c), 1e-5, e0);
    vec g = randn((size_t)B * C), d0 = randn(x.size()), dc = d0;
    trn_meanpool_backward(dc.data(), g.data(), B, T, C);
    dbuf dg(g), dd(d0);
    GPU->meanpool_backward(dd.f(), dg.f(), B, T, C);
    report("meanpool_backward", maxdiff(dd.get(), dc), 1e-5, e0);
}

static void test_adamw(size_t n) {
    long e0 = harness_errors();
    vec p = randn(n), g = randn(n), m = randn(n, 0.1f), v = randn(n, 0.1f);
    for (size_t i = 0; i < n; i++) v[i] = v[i] * v[i];
    vec pc = p, mc = m, vc = v;
    trn_adamw_update(pc.data(), g.data(), mc.data(), vc.data(), n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.19f, 0.0975f);
    dbuf dp(p), dg(g), dm(m), dv(v);
    GPU->adamw_update(dp.f(), dg.f(), dm.f(), dv.f(), n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.19f, 0.0975f);
    double d = fmax(maxdiff(dp.get(), pc), fmax(maxdiff(dm.get(), mc), maxdiff(dv.get(), vc)));
    report("adamw_update", d, 1e-5, e0);
}

/* memory ops of the table: zero, copy, upload/download round trip */
static void test_memory(void) {
    vec x = randn(1001);
    dbuf a(x), b(NULL, x.size() * 4);
    GPU->copy(b.p, a.p, x.size() * 4);
    CHECK(maxdiff(b.get(), x) == 0.0, "copy\n");
    GPU->zero(a.p, x.size() * 4);
    GPU->sync();
    CHECK(maxdiff(a.get(), vec(x.size(), 0.0f)) == 0.0, "zero\n");
    /* zero-sized calls launch nothing (a 0-block launch is an error on a GPU) */
    GPU->gelu_forward(a.f(), b.f(), 0);
    GPU->matmul_forward(a.f(), b.f(), b.f(), NULL, 0, 4, 4);
    GPU->layernorm_forward(a.f(), a.f(), a.f(), b.f(), b.f(), b.f(), 0, 4);
    CHECK(GPU->sum_squares(a.f(), 0) == 0.0, "sum_squares of nothing\n");
}

/* ------------------------------------------------------- a small GPT, twice */
struct gpt {
    trn_model m;
    int V, Vp, C, NH, L, T;
    trn_tensor *wte, *wpe, *lnf_w, *lnf_b;
    std::vector<trn_tensor *> blk; /* 12 per layer */
};
static void gpt_create(gpt *g, const trn_backend *be, int V, int Vp, int C, int NH, int L, int T) {
    trn_model_init(&g->m, be);
    g->V = V; g->Vp = Vp; g->C = C; g->NH = NH; g->L = L; g->T = T;
    trn_model *m = &g->m;
    g->wte = trn_param2(m, "wte", Vp, C);
    g->wpe = trn_param2(m, "wpe", T, C);
    char n[64];
    for (int l = 0; l < L; l++) {
        const char *names[12] = {"ln1.w", "ln1.b", "qkv.w", "qkv.b", "proj.w", "proj.b",
                                 "ln2.w", "ln2.b", "fc.w",  "fc.b",  "fcp.w",  "fcp.b"};
        int d0[12] = {C, C, 3 * C, 3 * C, C, C, C, C, 4 * C, 4 * C, C, C};
        int d1[12] = {0, 0, C, 0, C, 0, 0, 0, C, 0, 4 * C, 0};
        for (int k = 0; k < 12; k++) {
            snprintf(n, sizeof n, "h%d.%s", l, names[k]);
            g->blk.push_back(d1[k] ? trn_param2(m, n, d0[k], d1[k]) : trn_param1(m, n, d0[k]));
        }
    }
    g->lnf_w = trn_param1(m, "lnf.w", C);
    g->lnf_b = trn_param1(m, "lnf.b", C);
    if (trn_model_alloc(m) != TRN_OK) trn_fatal("gpt: %s", trn_error_reason());
}
/* the same numbers into both models: generated on the host, then written */
static void gpt_init(gpt *g, uint64_t seed) {
    trn_rng r;
    trn_rng_seed(&r, seed);
    for (int i = 0; i < g->m.n_params; i++) {
        trn_tensor *t = g->m.params[i];
        vec h(t->size);
        int is_ln_w = strstr(t->name, "ln") && strstr(t->name, ".w");
        for (size_t k = 0; k < t->size; k++)
            h[k] = t->ndim == 2 ? 0.05f * trn_rng_normal(&r) : (is_ln_w ? 1.0f : 0.01f * trn_rng_normal(&r));
        trn_write(&g->m, t, h.data());
    }
}
static trn_tensor *gpt_loss(gpt *g, const int *ids, const int *pos, const int *targets, int B) {
    trn_model *m = &g->m;
    int T = g->T;
    trn_tensor *x = trn_add(m, trn_embedding(m, g->wte, ids, B, T), trn_embedding(m, g->wpe, pos, B, T));
    for (int l = 0; l < g->L; l++) {
        trn_tensor **p = &g->blk[(size_t)l * 12];
        trn_tensor *h = trn_layernorm(m, x, p[0], p[1]);
        h = trn_attention(m, trn_linear(m, h, p[2], p[3]), g->NH, 1);
        x = trn_add(m, x, trn_linear(m, h, p[4], p[5]));
        h = trn_layernorm(m, x, p[6], p[7]);
        h = trn_linear(m, trn_gelu(m, trn_linear(m, h, p[8], p[9])), p[10], p[11]);
        x = trn_add(m, x, h);
    }
    x = trn_layernorm(m, x, g->lnf_w, g->lnf_b);
    return trn_cross_entropy(m, trn_linear(m, x, g->wte, NULL), targets, g->V);
}

/* Tolerances: the loss per step (absolute), the gradient norm (relative),
   and the parameters after 10 steps as ||p_cuda - p_cpu|| / ||p_cpu - p_0||:
   the disagreement as a fraction of how far training moved the weights.
   (The largest single-parameter difference is printed too: Adam divides
   by sqrt(v), so a weight whose gradient is near zero moves by ~lr per
   step in a direction that rounding can flip. It is checked to be below
   2 lr fp32, 15 lr with TF32.) */
static void test_training(int tf32, double loss_tol, double param_tol) {
    const int V = 67, Vp = 72, C = 48, NH = 4, L = 2, T = 13, B = 3, steps = 10;
    long e0 = harness_errors();
    trn_cuda_set_tf32(tf32);
    gpt cg, gg;
    gpt_create(&cg, CPU, V, Vp, C, NH, L, T);
    gpt_create(&gg, GPU, V, Vp, C, NH, L, T);
    gpt_init(&cg, 7);
    gpt_init(&gg, 7);
    vec p0(cg.m.n_floats);
    CPU->download(p0.data(), cg.m.param_data, p0.size() * 4);
    trn_adamw_desc desc;
    memset(&desc, 0, sizeof desc);
    desc.lr = 3e-3f;
    desc.weight_decay = 0.1f;
    trn_adamw oc, og;
    trn_adamw_init(&oc, &desc);
    trn_adamw_init(&og, &desc);
    /* a learnable sequence: token t+1 follows token t (mod V), random starts */
    std::vector<int> ids((size_t)B * T), tg((size_t)B * T), pos((size_t)B * T);
    double worst_loss = 0, worst_norm = 0;
    float first = 0, last = 0;
    for (int s = 0; s < steps; s++) {
        for (int b = 0; b < B; b++) {
            int start = (int)trn_rng_below(&RNG, (uint32_t)V);
            for (int t = 0; t < T; t++) {
                ids[(size_t)(b * T + t)] = (start + t) % V;
                tg[(size_t)(b * T + t)] = (start + t + 1) % V;
                pos[(size_t)(b * T + t)] = t;
            }
        }
        float loss[2], norm[2];
        gpt *gs[2] = {&cg, &gg};
        trn_adamw *os[2] = {&oc, &og};
        for (int k = 0; k < 2; k++) {
            trn_model *m = &gs[k]->m;
            trn_zero_grad(m);
            trn_reset(m);
            trn_tensor *l = gpt_loss(gs[k], ids.data(), pos.data(), tg.data(), B);
            loss[k] = trn_item(m, l);
            trn_backward(m, l);
            norm[k] = trn_clip_grad_norm(m, 1.0f);
            if (trn_adamw_step(os[k], m, desc.lr) != TRN_OK) trn_fatal("adamw: %s", trn_error_reason());
        }
        if (s == 0) first = loss[0];
        last = loss[0];
        worst_loss = fmax(worst_loss, fabs((double)loss[0] - loss[1]));
        worst_norm = fmax(worst_norm, fabs((double)norm[0] - norm[1]) / norm[0]);
        printf("  step %2d  loss cpu %.6f cuda %.6f  |diff| %.2g   grad norm cpu %.5f cuda %.5f\n", s, loss[0],
               loss[1], fabs((double)loss[0] - loss[1]), norm[0], norm[1]);
    }
    /* the parameters after 10 AdamW steps */
    vec pc(cg.m.n_floats), pg(gg.m.n_floats);
    CPU->download(pc.data(), cg.m.param_data, pc.size() * 4);
    GPU->download(pg.data(), gg.m.param_data, pg.size() * 4);
    double dp = maxdiff(pc, pg), num = 0, den = 0;
    for (size_t i = 0; i < pc.size(); i++) {
        num += ((double)pg[i] - pc[i]) * ((double)pg[i] - pc[i]);
        den += ((double)pc[i] - p0[i]) * ((double)pc[i] - p0[i]);
    }
    char name[64];
    snprintf(name, sizeof name, "gpt 10 steps: loss%s", tf32 ? " (TF32)" : "");
    report(name, worst_loss, loss_tol, e0);
    snprintf(name, sizeof name, "gpt 10 steps: params rel%s", tf32 ? " (TF32)" : "");
    report(name, sqrt(num / den), param_tol, e0);
    snprintf(name, sizeof name, "gpt 10 steps: params max%s", tf32 ? " (TF32)" : "");
    report(name, dp, (tf32 ? 15 : 2) * desc.lr, e0);
    snprintf(name, sizeof name, "gpt 10 steps: grad norm rel%s", tf32 ? " (TF32)" : "");
    report(name, worst_norm, loss_tol, e0);
    CHECK(last < first - 0.1f, "the small GPT did not learn: loss %.4f -> %.4f\n", first, last);
    trn_adamw_free(&oc);
    trn_adamw_free(&og);
    trn_model_free(&cg.m);
    trn_model_free(&gg.m);
    trn_cuda_set_tf32(0);
}

/* ------------------------------------------ races the sanitizers catch */
#ifdef TRN_CUDA_ON_CPU
/* broken on purpose: rows with the same id add without atomicAdd. The
   harness never interrupts a fiber inside the +=, so the sum comes out
   right; built with -fsanitize=thread (tests/test_cuda_race.cpp) it is
   reported as a data race. */
__global__ void racy_scatter(float *dst, const float *src, const int *ids, int N, int C) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N * C) dst[ids[i / C] * C + i % C] += src[i];
}
/* broken on purpose: a tree reduction without the barrier in its loop.
   Highest thread first, this one order happens to give the right sum. */
__global__ void block_sum_no_loop_barrier(float *out, const float *x, int n) {
    __shared__ float buf[256];
    int t = threadIdx.x;
    buf[t] = t < n ? x[t] : 0.0f;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1)
        if (t < s) buf[t] += buf[t + s]; /* the bug: no __syncthreads() here */
    if (t == 0) *out = buf[0];
}
static int race_demo(int which) {
    if (which == 1) {
        const int N = 8, C = 5;
        int ids[N] = {3, 1, 3, 0, 2, 3, 1, 0};
        vec src((size_t)N * C, 1.0f), dst(4 * C, 0.0f);
        dbuf ds(src), dd(dst), di(ids, sizeof ids);
        TRN_CUDA_LAUNCH(racy_scatter, dim3(1), dim3(64), 0, (cudaStream_t)0, dd.f(), (const float *)ds.f(),
                        (const int *)di.i(), N, C);
        vec got = dd.get();
        printf("racy_scatter: row 3 = %g (3 expected: the harness alone does not see this race)\n", got[15]);
    } else {
        vec x(256);
        double want = 0;
        for (int i = 0; i < 256; i++) { x[(size_t)i] = (float)(i % 5); want += x[(size_t)i]; }
        dbuf dx(x), dout(NULL, 4);
        cuemu::config().order = 2;
        TRN_CUDA_LAUNCH(block_sum_no_loop_barrier, dim3(1), dim3(256), 0, (cudaStream_t)0, dout.f(),
                        (const float *)dx.f(), 256);
        cuemu::config().order = 0;
        printf("block_sum_no_loop_barrier: %g (%g expected: this thread order hides the missing barrier)\n",
               dout.get()[0], want);
    }
    return 0;
}
#endif

/* ----------------------------------------------- errors and the ledger */
static void test_errors_before_init(void) {
    {   /* the backend table before trn_cuda_init: a message, exit code 3 (in a child) */
        char buf[512];
        check_fatal("trn_cuda_backend before trn_cuda_init", [](void *) { trn_cuda_backend(); }, NULL,
                    "trn_cuda_backend", "trn_cuda_init", buf, sizeof buf);
    }
#ifdef TRN_CUDA_ON_CPU
    /* no device: one clear line, not a crash */
    cuemu::config().device_count = 0;
    trn_result r = trn_cuda_init(0);
    printf("no device:   %s: %s\n", trn_result_string(r), trn_error_reason());
    CHECK(r == TRN_ERR_BACKEND && strstr(trn_error_reason(), "no CUDA device"), "no device: %d %s\n", (int)r,
          trn_error_reason());
    cuemu::config().device_count = 1;
    /* a driver older than the runtime */
    cuemu::config().driver_version = 11020;
    r = trn_cuda_init(0);
    printf("old driver:  %s: %s\n", trn_result_string(r), trn_error_reason());
    CHECK(r == TRN_ERR_BACKEND && strstr(trn_error_reason(), "update the driver"), "old driver: %s\n",
          trn_error_reason());
    /* no driver at all (what this program sees on a machine without a GPU) */
    cuemu::config().driver_version = 0;
    r = trn_cuda_init(0);
    printf("no driver:   %s: %s\n", trn_result_string(r), trn_error_reason());
    CHECK(r == TRN_ERR_BACKEND && strstr(trn_error_reason(), "no NVIDIA driver"), "no driver: %s\n",
          trn_error_reason());
    cuemu::config().driver_version = 12040;
    r = trn_cuda_init(3);
    CHECK(r == TRN_ERR_INVALID && strstr(trn_error_reason(), "does not exist"), "device 3: %s\n", trn_error_reason());
    CHECK(trn_ledger_current(TRN_DEVICE, TRN_KIND_RUNTIME) == 0, "failed inits left bytes in the ledger\n");
#endif
}

static void test_ledger(void) {
    trn_ledger_snapshot s;
    trn_ledger_read(&s);
    size_t runtime = trn_ledger_current(TRN_DEVICE, TRN_KIND_RUNTIME);
    printf("ledger after init: runtime %.1f MiB (context + cuBLAS + 32 MiB workspace); driver: %.1f MiB used of %.1f GiB\n",
           runtime / 1048576.0, s.device_used / 1048576.0, s.device_total / 1073741824.0);
    CHECK(runtime >= ((size_t)32 << 20), "runtime kind does not hold the cuBLAS workspace\n");
#ifdef TRN_CUDA_ON_CPU
    /* cuBLAS uses the workspace we counted (cublasSetStream would have reset it) */
    cublasHandle_t h = (cublasHandle_t)trn_cuda_cublas();
    CHECK(h && h->ws_bytes == ((size_t)32 << 20) && cuemu::is_device(h->workspace, h->ws_bytes),
          "cuBLAS does not use the counted workspace\n");
#endif
    CHECK(s.device_total > 0, "no device probe\n");
    size_t before = trn_ledger_current(TRN_DEVICE, TRN_KIND_WEIGHTS);
    void *p = GPU->alloc(12345, TRN_KIND_WEIGHTS);
    CHECK(p && trn_ledger_current(TRN_DEVICE, TRN_KIND_WEIGHTS) == before + 12345, "alloc not counted\n");
#ifdef TRN_CUDA_ON_CPU
    /* here the driver's view is exact, so it must equal the ledger's total */
    trn_ledger_read(&s);
    CHECK(s.device_used == trn_ledger_total(TRN_DEVICE), "driver %zu vs ledger %zu\n", s.device_used,
          trn_ledger_total(TRN_DEVICE));
#endif
    GPU->free(p);
    CHECK(trn_ledger_current(TRN_DEVICE, TRN_KIND_WEIGHTS) == before, "free not counted\n");
#ifdef TRN_CUDA_ON_CPU
    /* out of memory: NULL, a reason, the ledger printed; then a model fails cleanly */
    size_t keep = cuemu::config().total_mem;
    cuemu::config().total_mem = ((size_t)400 << 20);
    p = GPU->alloc((size_t)200 << 20, TRN_KIND_ACTIVATIONS);
    CHECK(p == NULL && strstr(trn_error_reason(), "out of device memory"), "OOM: %p %s\n", p, trn_error_reason());
    trn_model m;
    trn_model_init(&m, GPU);
    trn_param2(&m, "huge", 1 << 14, 1 << 12); /* 256 MiB */
    trn_result r = trn_model_alloc(&m);
    CHECK(r == TRN_ERR_NOMEM, "model alloc on a full device: %s\n", trn_result_string(r));
    trn_model_free(&m);
    cuemu::config().total_mem = keep;
#endif
}

int main(int argc, char **argv) {
    uint64_t seed = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--seed") && i + 1 < argc) seed = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--help")) {
            printf("usage: %s [--seed N] [--race-demo | --race-demo-barrier]\n"
                   "  the demos launch a kernel with a data race (a += that should be atomicAdd; a\n"
                   "  reduction missing a barrier) whose result comes out right: the harness alone\n"
                   "  cannot see it, the -fsanitize=thread build (test_cuda_race) reports it\n", argv[0]);
            return 0;
        }
#ifdef TRN_CUDA_ON_CPU
        else if (!strcmp(argv[i], "--race-demo") || !strcmp(argv[i], "--race-demo-barrier")) {
            trn_cuda_set_tf32(0);
            if (trn_cuda_init(0) != TRN_OK) return 1;
            GPU = trn_cuda_backend();
            return race_demo(strcmp(argv[i], "--race-demo") == 0 ? 1 : 2);
        }
#endif
        else { fprintf(stderr, "test_cuda_kernels: unknown flag %s (try --help)\n", argv[i]); return 2; }
    }
    trn_rng_seed(&RNG, seed);
    trn_set_threads(1); /* the CPU reference: one thread is enough, and never spins */
    test_errors_before_init();
    trn_cuda_set_tf32(0);
    if (trn_cuda_init(0) != TRN_OK) {
        /* only the nvcc build on a machine without a GPU gets here */
        printf("no CUDA device (%s): nothing to test\n", trn_error_reason());
        return check_summary();
    }
    CPU = trn_cpu_backend();
    GPU = trn_cuda_backend();
    printf("device: %s\n", trn_cuda_device_name());
    test_ledger();
    test_memory();
    test_matmul(37, 53, 29, 1, 2e-5, "");
    test_matmul(5, 200, 7, 0, 2e-5, " (no bias)");
    test_matmul(70, 24, 264, 1, 2e-5, " (OC % 8 == 0)"); /* the bias's column sums by 16-byte packs */
    trn_cuda_set_tf32(1);
    test_matmul(37, 53, 29, 1, 3e-2, " (TF32)");
    trn_cuda_set_tf32(0);
    test_embedding(37, 53, 11);
    test_layernorm(37, 53);
    test_layernorm(9, 300);
    test_layernorm(11, 64);     /* C % 8 == 0: 16-byte packs */
    test_layernorm(200, 40);    /* 4 row chunks, 2 column groups (one ragged): the last block of each sums dw, db */
    test_layernorm(200, 40);    /* again: the launch before left its "which block is last" counters at 0 */
    test_layernorm(200, 264);   /* C % 8 == 0: the one-launch kernel, 4 blocks (the last 8 rows short), 2 packs a lane */
    test_layernorm(5, 768);     /* GPT-2's C, 3 packs a lane; fewer rows than one block's 8 warps */
    test_layernorm(130, 1024);  /* 4 packs a lane (the widest one-launch kernel), 3 blocks, 2 rows in the last */
    test_layernorm(70, 520);    /* 3 packs, the third only lane 0's */
    test_layernorm(1100, 64);   /* 18 blocks: 2 groups (of 16, then 2), their sums summed by the last */
    test_layernorm(8300, 16);   /* 128 blocks (the most), 8 groups: warps take rows 8 x 128 apart, 65 or 64 a block */
    test_layernorm(100, 1032);  /* C % 8 == 0 but wider than 1024: the dx kernel, then dw, db partials by packs */
    test_embedding(13, 64, 5);  /* the same */
    test_elementwise(64);       /* packs alone, no tail */
    test_elementwise(1001);
    test_attention(2, 13, 3, 3, 10, 1);
    test_attention(2, 13, 3, 3, 10, 0);
    test_attention(3, 40, 2, 2, 12, 1); /* B > NH: the GEMMs batch over b */
    test_attention(2, 37, 4, 2, 9, 1);  /* grouped-query, T past one tile */
    test_attention(1, 70, 4, 1, 64, 0); /* GPT-2's head size, 3 tiles */
    test_attention(1, 45, 8, 2, 40, 1);
    test_crossentropy(19, 67, 72, 1e-5);
    test_crossentropy(3, 1000, 1003, 1e-5);
    /* the fused kernel: rows of up to 52,736 fp32 columns go to the one-read
       kernel (trn__k_xent_fused_reg: 10 packs a thread in registers, the
       rest in shared memory), longer ones to the two-pass kernel */
    test_crossentropy_fused(19, 67, 72, 1.0f / 19, 1e-5); /* rows aligned, padding in the last pack */
    test_crossentropy_fused(5, 1000, 1003, 0.37f, 1e-5);  /* rows start anywhere: head, packs, tail */
    test_crossentropy_fused(4, 1003, 1003, 0.37f, 1e-5);  /* no padding: the target in the tail (row 0) */
    test_crossentropy_fused(3, 2, 3, 1.0f, 1e-5);         /* shorter than one pack */
    test_crossentropy_fused(3, 1, 5, 1.0f, 1e-5);         /* one class: loss 0, gradient 0 */
    test_crossentropy_fused(3, 50257, 50304, 1.0f / 3, 2e-5); /* GPT-2: the shared-memory packs, the last slot partly */
    test_crossentropy_fused(3, 52730, 52735, 0.5f, 2e-5);  /* every pack slot, rows 1, 2 unaligned: one read */
    test_crossentropy_fused(3, 52737, 52737, 0.5f, 2e-5);  /* one column too many: the two-pass kernel */
    test_crossentropy_fused(3, 100, 52741, 0.5f, 1e-5);    /* two-pass (by Vp): padding in its packs, heads of 3, 2 */
#ifndef CUEMU_TSAN /* (the race detector sees the same blocks and barriers at the small V's) */
    test_crossentropy(2, 128256, 128256, 3e-5);           /* Llama 3's vocabulary: targets above 65535 */
    test_crossentropy_fused(3, 128256, 128256, 1.0f / 3, 3e-5);
#endif
    test_align16();
    test_meanpool(3, 13, 53);
    test_adamw(1001);
#ifndef CUEMU_TSAN /* the race detector build checks the kernels above; training adds only time */
    printf("training a 2-layer GPT (C=48, T=13, V=67) for 10 steps, fp32:\n");
    test_training(0, 1e-4, 1e-3);
    printf("the same with TF32 matmuls:\n");
    test_training(1, 1e-2, 0.1);
#endif

    printf("\n%-40s %12s %10s\n", "kernel", "max|diff|", "tolerance");
    for (size_t i = 0; i < results.size(); i++)
        printf("%-40s %12.3g %10.1g\n", results[i].name, results[i].diff, results[i].tol);
#ifdef TRN_CUDA_ON_CPU
    printf("harness: %ld launches, %ld blocks, %lld GEMMs, %ld errors\n", cuemu::S().launches, cuemu::S().blocks,
           cuemu::gemms, cuemu::errors());
#endif
    trn_cuda_shutdown();
    CHECK(trn_ledger_current(TRN_DEVICE, TRN_KIND_RUNTIME) == 0, "shutdown left runtime bytes in the ledger\n");
    return check_summary();
}
