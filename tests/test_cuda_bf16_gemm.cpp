// build: -O1 -g1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined -Wno-maybe-uninitialized
/* tests/test_cuda_bf16_gemm.cpp - the GEMMs of train_cuda.h in bf16
   (TRN_CUDA_BF16): matmul (through cuBLASLt: forward with the bias in its
   epilogue; backward with dinp in bf16 and dw, dbias in fp32), the fused
   MLP pair (matmul_gelu_forward, matmul_dgelu_backward: cuBLASLt's
   GELU_AUX_BIAS and DGELU epilogues, the unfused fallback, fp32 and tf32),
   bmm, the materialized attention and attention over the KV cache. Each runs in bf16
   and is compared with the CPU backend's fp32 result on the SAME inputs,
   rounded to bf16 first, so that only the GPU path's own roundings differ.
   Then the harness's side (tests/cuda_on_cpu.h): cublasGemmEx's bf16
   rounding, the argument checks of the cuBLASLt emulation and its GELU
   epilogues bit for bit.

   Tolerances, element by element, from two facts:
   - bf16 keeps 8 significant bits, so one rounding to nearest moves x by
     at most u = 2^-8 |x| (0.39%);
   - a sum of K products in fp32, in any order, is within K 2^-24 S of the
     exact sum, S the sum of the products' absolute values; two different
     orders (GPU and CPU) differ by at most K 2^-23 S. The products of two
     bf16 values are exact in fp32. S is computed by the same CPU function
     on absolute values, so the bound grows with K (worst case; a random
     walk would be sqrt(K)) and never needs a fudge factor.
   A bf16 output that was rounded once: tol = u |ref| + K 2^-23 S. An fp32
   output (dw, dbias): K 2^-23 S alone, 4 orders of magnitude below a bf16
   rounding, so a weight gradient stored in bf16 would fail. Attention adds
   the softmax of rounded scores (see test_attention). Every check also
   runs the result against a deliberately wrong one (no bias, overwrite
   instead of accumulate, a transpose, a mask off) and demands that the
   tolerance tells them apart: a test that cannot fail is not a test.

   Shapes are odd: N, C, OC, T, hs not multiples of 8 or 16.
   Run: tests/bin/test_cuda_bf16_gemm      (CUEMU_SEED=n: the thread order)
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
#include <algorithm>
#include <vector>
#ifdef TRN_CUDA_ON_CPU
#include <sys/wait.h>
#include <unistd.h>
#endif

typedef std::vector<float> vec;
static const trn_backend *GPU; /* the bf16 table */
static trn_rng RNG;
static const double U = 1.0 / 256;          /* bf16: 2^-8 per rounding        */
static const double SUM = 2.0 / 16777216.0; /* fp32: 2^-23 per term of a sum  */

/* cuBLASLt's epilogues on a real GPU round more than the harness does.
   On an H100 (cuBLASLt 13.0, 2026-11-27) a bf16 output with the BIAS
   epilogue came out as if the product had been rounded to bf16 before the
   bias was added (errors up to 145 times the one-rounding bound where the
   bias cancels most of the product: u |product| + u |out|), and the GELU /
   DGELU epilogues on exact inputs 1 bf16 ulp from the tanh form where the
   bound allows half of one (a fast tanh, or the same extra rounding).
   The harness models the documented contract (fp32 accumulate, epilogue,
   one rounding) and is held to it; on a GPU each epilogue output gets one
   more rounding: LT_EXTRA = 1. The wrong results the checks must miss stay
   many tolerances away. */
#ifdef TRN_CUDA_ON_CPU
static const double LT_EXTRA = 0;
#else
static const double LT_EXTRA = 1;
#endif

static float bf(float x) { return __bfloat162float(__float2bfloat16(x)); }
/* normal values, already bf16 (what the GPU reads is what the CPU reads) */
static vec randbf(size_t n, float scale = 1.0f) {
    vec v(n);
    for (size_t i = 0; i < n; i++) v[i] = bf(scale * trn_rng_normal(&RNG));
    return v;
}
static vec absv(vec v) {
    for (float &x : v) x = fabsf(x);
    return v;
}
static vec minus(vec a, const vec &b) {
    for (size_t i = 0; i < a.size(); i++) a[i] -= b[i];
    return a;
}

/* a device copy in bf16 or fp32 that frees itself; without a host source it
   is filled with NaN bytes, so an element the GPU forgets to write fails */
enum { F32 = 0, BF16 = 1 };
struct dbuf {
    void *p = nullptr;
    size_t n;
    int dt;
    size_t bytes() const { return n * (dt == BF16 ? 2 : 4); }
    dbuf(size_t n_, int dt_, const vec *host = nullptr) : n(n_), dt(dt_) {
        p = GPU->alloc(bytes() ? bytes() : 1, TRN_KIND_TEMP);
        if (!p) trn_fatal("test: %s", trn_error_reason());
        std::vector<unsigned char> h(bytes(), 0xff);
        if (host && dt == BF16)
            for (size_t i = 0; i < n; i++) ((__nv_bfloat16 *)h.data())[i] = __float2bfloat16((*host)[i]);
        if (host && dt == F32) memcpy(h.data(), host->data(), bytes());
        if (n) GPU->upload(p, h.data(), bytes());
    }
    dbuf(const vec &v, int dt_) : dbuf(v.size(), dt_, &v) {}
    ~dbuf() { GPU->free(p); }
    float *f() { return (float *)p; } /* the table's signatures say float * */
    vec get() const {
        std::vector<unsigned char> h(bytes());
        vec v(n);
        if (n) GPU->download(h.data(), p, bytes());
        for (size_t i = 0; i < n; i++)
            v[i] = dt == BF16 ? __bfloat162float(((const __nv_bfloat16 *)h.data())[i]) : ((const float *)h.data())[i];
        return v;
    }
};

/* the largest |got - ref| / tol over the elements (<= 1 passes; NaN fails) */
static double worst(const vec &got, const vec &ref, const vec &tol) {
    double w = 0;
    if (got.size() != ref.size()) return INFINITY;
    for (size_t i = 0; i < got.size(); i++) {
        double d = fabs((double)got[i] - (double)ref[i]), r = d == 0 ? 0 : d / tol[i];
        if (!(r <= w)) w = r;
    }
    return w;
}
static double maxdiff(const vec &a, const vec &b) {
    double d = 0;
    for (size_t i = 0; i < a.size(); i++) d = fmax(d, fabs((double)a[i] - (double)b[i]));
    return d;
}
/* got within tol of ref, and NOT within tol of `wrong` (if given) */
static void expect(const char *name, const vec &got, const vec &ref, const vec &tol, const vec *wrong, long e0) {
    double w = worst(got, ref, tol);
    printf("%-44s max|diff| %9.3g  worst diff/tol %6.3f", name, maxdiff(got, ref), w);
    CHECK(w <= 1.0, "%s: off by %.3g tolerances\n", name, w);
    if (wrong) {
        double ww = worst(got, *wrong, tol);
        printf("  (wrong result: %.3g)", ww);
        CHECK(ww > 1.0, "%s: the tolerance cannot tell the result from a wrong one\n", name);
    }
    printf("\n");
    CHECK(harness_errors() == e0, "%s: the harness reported %ld errors\n", name, harness_errors() - e0);
}
/* one bf16 rounding of a K-term fp32 sum: u |ref| + K 2^-23 S */
static vec tol_sum(const vec &ref, const vec &S, int K, double roundings) {
    vec t(ref.size());
    for (size_t i = 0; i < t.size(); i++) t[i] = (float)(roundings * U * fabs(ref[i]) + K * SUM * S[i]);
    return t;
}

/* ------------------------------------------------------------------ matmul */
static void test_matmul(int N, int C, int OC, int with_bias) {
    long e0 = harness_errors();
    char name[64];
    vec inp = randbf((size_t)N * C), w = randbf((size_t)OC * C, 0.3f), bias = randbf((size_t)OC);
    const float *b = with_bias ? bias.data() : NULL;
    vec ref((size_t)N * OC), S(ref.size()), wrong(ref.size());
    trn_matmul_forward(ref.data(), inp.data(), w.data(), b, N, C, OC);
    trn_matmul_forward(S.data(), absv(inp).data(), absv(w).data(), with_bias ? absv(bias).data() : NULL, N, C, OC);
    /* the wrong result: the bias forgotten (or added when none was asked) */
    trn_matmul_forward(wrong.data(), inp.data(), w.data(), with_bias ? NULL : bias.data(), N, C, OC);

    dbuf di(inp, BF16), dw(w, BF16), db(bias, BF16), dout(ref.size(), BF16);
#ifdef TRN_CUDA_ON_CPU
    long launches0 = cuemu::S().launches;
    long long gemms0 = cuemu::gemms;
#endif
    GPU->matmul_forward(dout.f(), di.f(), dw.f(), with_bias ? db.f() : NULL, N, C, OC);
#ifdef TRN_CUDA_ON_CPU
    /* the bias is added in cuBLASLt's epilogue: one GEMM, no kernel */
    CHECK(cuemu::S().launches == launches0 && cuemu::gemms == gemms0 + 1,
          "matmul_forward bf16: %ld kernel launches and %lld GEMMs, want 0 and 1\n", cuemu::S().launches - launches0,
          cuemu::gemms - gemms0);
#endif
    snprintf(name, sizeof name, "matmul_forward %dx%d->%d%s", N, C, OC, with_bias ? " +bias" : "");
    vec tol = tol_sum(ref, S, C, 1);
    if (with_bias) /* on a GPU: the product (= wrong, the bias left out) rounded once more */
        for (size_t i = 0; i < tol.size(); i++) tol[i] += (float)(LT_EXTRA * U * fabs(wrong[i]));
    expect(name, dout.get(), ref, tol, &wrong, e0);

    /* backward accumulates into every gradient: start from nonzero values.
       dw and dbias are fp32 (their start needs no rounding) */
    vec g = randbf((size_t)N * OC), dinp0 = randbf((size_t)N * C), dw0((size_t)OC * C), db0((size_t)OC);
    for (float &x : dw0) x = trn_rng_normal(&RNG);
    for (float &x : db0) x = trn_rng_normal(&RNG);
    vec rdi = dinp0, rdw = dw0, rdb = db0, Sdi = absv(dinp0), Sdw = absv(dw0), Sdb = absv(db0);
    trn_matmul_backward(rdi.data(), rdw.data(), with_bias ? rdb.data() : NULL, g.data(), inp.data(), w.data(), N, C, OC);
    trn_matmul_backward(Sdi.data(), Sdw.data(), with_bias ? Sdb.data() : NULL, absv(g).data(), absv(inp).data(),
                        absv(w).data(), N, C, OC);
    dbuf dg(g, BF16), ddi(dinp0, BF16), ddw(dw0, F32), ddb(db0, F32);
    GPU->matmul_backward(ddi.f(), ddw.f(), with_bias ? ddb.f() : NULL, dg.f(), di.f(), dw.f(), N, C, OC);
    vec over = minus(rdi, dinp0); /* wrong: beta = 0, dinp overwritten */
    snprintf(name, sizeof name, "matmul_backward dinp (bf16, +=) %dx%d", N, C);
    expect(name, ddi.get(), rdi, tol_sum(rdi, Sdi, OC, 1), &over, e0);
    over = minus(rdw, dw0);
    vec tdw = tol_sum(rdw, Sdw, N, 0);
    snprintf(name, sizeof name, "matmul_backward dw (fp32, +=) %dx%d", OC, C);
    expect(name, ddw.get(), rdw, tdw, &over, e0);
    vec in_bf16 = rdw; /* wrong: dw stored in bf16 */
    for (float &x : in_bf16) x = bf(x);
    CHECK(worst(ddw.get(), in_bf16, tdw) > 1.0, "matmul_backward dw: cannot tell fp32 from bf16\n");
    if (with_bias) {
        over = minus(rdb, db0);
        expect("matmul_backward dbias (fp32, +=)", ddb.get(), rdb, tol_sum(rdb, Sdb, N, 0), &over, e0);
    } else
        CHECK(maxdiff(ddb.get(), db0) == 0, "matmul_backward: dbias NULL, yet the buffer changed\n");
    /* NULL outputs are skipped */
    vec before = ddi.get();
    GPU->matmul_backward(NULL, NULL, NULL, dg.f(), di.f(), dw.f(), N, C, OC);
    CHECK(maxdiff(ddi.get(), before) == 0, "matmul_backward with NULL outputs changed something\n");

    /* _ex with dinp fresh (1) and dw, dbias known zero (2, train.h's
       grad_zero): all three WRITTEN, dbias by the dW GEMM's BGRADB epilogue
       (two GEMMs, no kernel). They start as NaN: a read of them shows. */
    if (with_bias) {
        vec zi((size_t)N * C, 0.0f), zw((size_t)OC * C, 0.0f), zb((size_t)OC, 0.0f);
        vec Zi = zi, Zw = zw, Zb = zb;
        trn_matmul_backward(zi.data(), zw.data(), zb.data(), g.data(), inp.data(), w.data(), N, C, OC);
        trn_matmul_backward(Zi.data(), Zw.data(), Zb.data(), absv(g).data(), absv(inp).data(), absv(w).data(), N, C, OC);
        dbuf ni(vec((size_t)N * C, NAN), BF16), nw(vec((size_t)OC * C, NAN), F32), nb(vec((size_t)OC, NAN), F32);
#ifdef TRN_CUDA_ON_CPU
        long l0 = cuemu::S().launches;
        long long g0 = cuemu::gemms;
#endif
        GPU->matmul_backward_ex(ni.f(), nw.f(), nb.f(), dg.f(), di.f(), dw.f(), N, C, OC, 1, 2, 2);
#ifdef TRN_CUDA_ON_CPU
        CHECK(cuemu::S().launches == l0 && cuemu::gemms == g0 + 2,
              "matmul_backward_ex (BGRADB): %ld kernel launches and %lld GEMMs, want 0 and 2\n",
              cuemu::S().launches - l0, cuemu::gemms - g0);
#endif
        vec wrong_b = zb; /* wrong: dbias added to its old values (db0) */
        for (size_t j = 0; j < wrong_b.size(); j++) wrong_b[j] += db0[j];
        snprintf(name, sizeof name, "matmul_backward_ex dinp (written) %dx%d", N, C);
        expect(name, ni.get(), zi, tol_sum(zi, Zi, OC, 1), NULL, e0);
        snprintf(name, sizeof name, "matmul_backward_ex dw (written) %dx%d", OC, C);
        expect(name, nw.get(), zw, tol_sum(zw, Zw, N, 0), NULL, e0);
        expect("matmul_backward_ex dbias (BGRADB, written)", nb.get(), zb, tol_sum(zb, Zb, N, 0), &wrong_b, e0);
    }
}

/* --------------------------------------------------------------------- bmm */
static void test_bmm(int Bt, int M, int N, int K, int ta, int tb) {
    long e0 = harness_errors();
    char name[64];
    vec a = randbf((size_t)Bt * M * K), b = randbf((size_t)Bt * K * N);
    vec ref((size_t)Bt * M * N), S(ref.size()), wrong(ref.size());
    trn_bmm_forward(ref.data(), a.data(), b.data(), Bt, M, N, K, ta, tb);
    trn_bmm_forward(S.data(), absv(a).data(), absv(b).data(), Bt, M, N, K, ta, tb);
    trn_bmm_forward(wrong.data(), a.data(), b.data(), Bt, M, N, K, ta, !tb); /* a transpose missed */
    dbuf da(a, BF16), db(b, BF16), dout(ref.size(), BF16);
    GPU->bmm_forward(dout.f(), da.f(), db.f(), Bt, M, N, K, ta, tb);
    snprintf(name, sizeof name, "bmm_forward ta %d tb %d", ta, tb);
    expect(name, dout.get(), ref, tol_sum(ref, S, K, 1), &wrong, e0);

    vec g = randbf(ref.size()), da0 = randbf(a.size()), db0 = randbf(b.size());
    vec rda = da0, rdb = db0, Sda = absv(da0), Sdb = absv(db0);
    trn_bmm_backward(rda.data(), rdb.data(), g.data(), a.data(), b.data(), Bt, M, N, K, ta, tb);
    trn_bmm_backward(Sda.data(), Sdb.data(), absv(g).data(), absv(a).data(), absv(b).data(), Bt, M, N, K, ta, tb);
    dbuf dg(g, BF16), dda(da0, BF16), ddb(db0, BF16);
    GPU->bmm_backward(dda.f(), ddb.f(), dg.f(), da.f(), db.f(), Bt, M, N, K, ta, tb);
    vec over = minus(rda, da0);
    snprintf(name, sizeof name, "bmm_backward da (+=) ta %d tb %d", ta, tb);
    expect(name, dda.get(), rda, tol_sum(rda, Sda, N, 1), &over, e0); /* da sums over N */
    over = minus(rdb, db0);
    snprintf(name, sizeof name, "bmm_backward db (+=) ta %d tb %d", ta, tb);
    expect(name, ddb.get(), rdb, tol_sum(rdb, Sdb, M, 1), &over, e0); /* db sums over M */
}

/* --------------------------------------------------------------- attention
   Forward, in bf16: S = round(scale Q K^T) moves each score by at most
   u |S| <= u M (M: the largest |score| of the problem); the softmax of
   scores each off by at most d moves P_ij by at most 2 d P_ij (to first
   order: exp(s + d) / sum ... ), and P is rounded: |dP_ij| <= u (1 + 2M)
   P_ij. Then O = round(P V): |dO_ic| <= u (1 + 2M) sum_j P_ij |V_jc| +
   u |O_ic| + T 2^-23 sum_j P_ij |V_jc|; sum_j P_ij |V_jc| is the CPU's
   attention on |V|. 10% on top for the second-order terms. */
static float max_score(const vec &qkv, int B, int T, int NH, int NKV, int hs, int causal) {
    int ld = (NH + 2 * NKV) * hs, R = NH / NKV;
    double m = 0, scale = 1.0 / sqrt((double)hs);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++)
                for (int s = 0; s <= (causal ? t : T - 1); s++) {
                    const float *q = &qkv[((size_t)b * T + t) * ld + (size_t)h * hs];
                    const float *k = &qkv[((size_t)b * T + s) * ld + (size_t)(NH + h / R) * hs];
                    double d = 0;
                    for (int c = 0; c < hs; c++) d += (double)q[c] * k[c];
                    m = fmax(m, fabs(d * scale));
                }
    return (float)m;
}
static vec tol_softmax(const vec &P, float M) {
    vec t(P.size());
    for (size_t i = 0; i < t.size(); i++) t[i] = (float)(1.1 * U * (1 + 2 * M) * P[i]);
    return t;
}
static vec tol_pv(const vec &O, const vec &A, float M, int T) { /* A: sum_j P_ij |V_jc| */
    vec t(O.size());
    for (size_t i = 0; i < t.size(); i++) t[i] = (float)(1.1 * U * ((1 + 2 * M) * A[i] + fabs(O[i])) + T * SUM * A[i]);
    return t;
}

static void test_attention(int B, int T, int NH, int NKV, int hs, int causal) {
    long e0 = harness_errors();
    char name[80], shape[40];
    int ld = (NH + 2 * NKV) * hs, R = NH / NKV;
    size_t nq = (size_t)B * T * ld, no = (size_t)B * T * NH * hs, na = (size_t)B * NH * T * T;
    snprintf(shape, sizeof shape, "%s T=%d %d/%d hs=%d", causal ? "causal" : "full", T, NH, NKV, hs);
    vec qkv = randbf(nq), out(no), att(na), absV = qkv, A(no), wout(no), watt(na), scr(na);
    for (int bt = 0; bt < B * T; bt++) /* |V|: the magnitude of O's sums */
        for (int c = (NH + NKV) * hs; c < ld; c++) absV[(size_t)bt * ld + c] = fabsf(absV[(size_t)bt * ld + c]);
    trn_attention_forward(out.data(), att.data(), qkv.data(), B, T, NH, NKV, hs, causal);
    trn_attention_forward(A.data(), scr.data(), absV.data(), B, T, NH, NKV, hs, causal);
    trn_attention_forward(wout.data(), watt.data(), qkv.data(), B, T, NH, NKV, hs, !causal); /* wrong mask */
    float M = max_score(qkv, B, T, NH, NKV, hs, causal);
    dbuf dq(qkv, BF16), dout(no, BF16), datt(na, BF16);
    GPU->attention_forward(dout.f(), datt.f(), dq.f(), B, T, NH, NKV, hs, causal);
    snprintf(name, sizeof name, "attention_forward att %s", shape);
    expect(name, datt.get(), att, tol_softmax(att, M), &watt, e0);
    snprintf(name, sizeof name, "attention_forward out %s", shape);
    expect(name, dout.get(), out, tol_pv(out, A, M, T), &wout, e0);

    /* Backward, from the bf16-rounded P of the CPU (both sides read it).
       Rounded on the GPU: dP = dO V^T, dS = P (dP - rowsum(P dP)), and each
       += into dQ (once), dK and dV (once per query head of the kv head: R
       times). An error e in dP entries gives dS an error of at most
       P_ij (|e_ij| + sum_l P_il |e_il|), so with e = u |dP|:
         E_ij = u (P_ij (|dP_ij| + sum_l P_il |dP_il|) + |dS_ij|)
       bounds each dS entry; dQ_ic moves by scale sum_j E_ij |K_jc|, dK_jc by
       scale sum_i E_ij |Q_ic|, and each output by its roundings: u (number)
       (|start| + the sum of the magnitudes of what was added). Computed
       here in double, head by head. */
    vec P = att;
    for (float &x : P) x = bf(x);
    vec g = randbf(no), d0 = randbf(nq), ref = d0, scratch(na), tol(nq, 0.0f), mag = absv(d0);
    trn_attention_backward(ref.data(), scratch.data(), g.data(), qkv.data(), P.data(), B, T, NH, NKV, hs, causal);
    double scale = 1.0 / sqrt((double)hs);
    std::vector<double> dP((size_t)T), E((size_t)T);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            int kh = NH + h / R, vh = NH + NKV + h / R;
            auto X = [&](int t, int head, int c) -> float { return qkv[((size_t)b * T + t) * ld + (size_t)head * hs + c]; };
            auto at = [&](int head, int t, int c) -> size_t { return ((size_t)b * T + t) * ld + (size_t)head * hs + c; };
            for (int i = 0; i < T; i++) {
                const float *Pi = &P[(((size_t)b * NH + h) * T + i) * T];
                const float *dO = &g[((size_t)b * T + i) * NH * hs + (size_t)h * hs];
                double D = 0, dot = 0;
                for (int j = 0; j < T; j++) {
                    dP[j] = 0;
                    for (int c = 0; c < hs; c++) dP[j] += (double)dO[c] * X(j, vh, c);
                    D += Pi[j] * fabs(dP[j]);
                    dot += Pi[j] * dP[j];
                }
                for (int j = 0; j < T; j++) {
                    double dS = Pi[j] * (dP[j] - dot);
                    E[j] = U * (Pi[j] * (fabs(dP[j]) + D) + fabs(dS));
                    for (int c = 0; c < hs; c++) {
                        tol[at(h, i, c)] += (float)(scale * E[j] * fabs(X(j, kh, c)));
                        mag[at(h, i, c)] += (float)(scale * fabs(dS * X(j, kh, c)));
                        tol[at(kh, j, c)] += (float)(scale * E[j] * fabs(X(i, h, c)));
                        mag[at(kh, j, c)] += (float)(scale * fabs(dS * X(i, h, c)));
                        mag[at(vh, j, c)] += (float)(Pi[j] * fabs(dO[c]));
                    }
                }
            }
        }
    for (int bt = 0; bt < B * T; bt++)
        for (int c = 0; c < ld; c++) {
            size_t i = (size_t)bt * ld + c;
            int roundings = c < NH * hs ? 1 : R;
            tol[i] = (float)(1.1 * (tol[i] + roundings * U * mag[i]) + T * SUM * mag[i]);
        }
    vec over = minus(ref, d0);
    dbuf dg(g, BF16), dP16(P, BF16), ddq(d0, BF16), dscr(na, BF16);
    GPU->attention_backward(ddq.f(), dscr.f(), dg.f(), dq.f(), dP16.f(), B, T, NH, NKV, hs, causal);
    snprintf(name, sizeof name, "attention_backward dqkv (+=) %s", shape);
    expect(name, ddq.get(), ref, tol, &over, e0);
}

/* attention over a KV cache: rows 0..pos-1 of the caches hold earlier keys
   and values (bf16), the call appends T rows (a copy: bit-exact) and
   attends with the causal offset pos. Tolerances as test_attention's
   forward. */
static void test_attention_kv(int B, int T, int pos, int maxT, int NH, int NKV, int hs) {
    long e0 = harness_errors();
    char name[80];
    int ld = (NH + 2 * NKV) * hs, Ckv = NKV * hs, P = pos + T, R = NH / NKV;
    size_t nc = (size_t)B * maxT * Ckv, no = (size_t)B * T * NH * hs, na = (size_t)B * NH * T * P;
    vec qkv = randbf((size_t)B * T * ld), kc = randbf(nc), vc = randbf(nc);
    vec out(no), att(na), kc_r = kc, vc_r = vc, A(no), scr(na), wout(no), watt(na);
    const float *q = qkv.data(), *k = q + NH * hs, *v = k + Ckv;
    trn_attention_kv_forward(out.data(), att.data(), q, ld, k, v, ld, kc_r.data(), vc_r.data(), B, T, pos, maxT, NH, NKV, hs);
    {   /* the magnitudes: the same with |v| and |vcache| */
        vec aq = qkv, akc = kc, avc = absv(vc);
        for (int bt = 0; bt < B * T; bt++)
            for (int c = NH * hs + Ckv; c < ld; c++) aq[(size_t)bt * ld + c] = fabsf(aq[(size_t)bt * ld + c]);
        trn_attention_kv_forward(A.data(), scr.data(), aq.data(), ld, aq.data() + NH * hs, aq.data() + NH * hs + Ckv,
                                 ld, akc.data(), avc.data(), B, T, pos, maxT, NH, NKV, hs);
        /* wrong: a kernel that ignores the rows already in the cache */
        vec zk(nc, 0.0f), zv(nc, 0.0f);
        trn_attention_kv_forward(wout.data(), watt.data(), q, ld, k, v, ld, zk.data(), zv.data(), B, T, pos, maxT, NH,
                                 NKV, hs);
    }
    double m = 0, scale = 1.0 / sqrt((double)hs);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++)
                for (int s = 0; s <= pos + t; s++) {
                    double d = 0;
                    for (int c = 0; c < hs; c++)
                        d += (double)qkv[((size_t)b * T + t) * ld + (size_t)h * hs + c] *
                             kc_r[((size_t)b * maxT + s) * Ckv + (size_t)(h / R) * hs + c];
                    m = fmax(m, fabs(d * scale));
                }
    float M = (float)m;
    dbuf dq(qkv, BF16), dkc(kc, BF16), dvc(vc, BF16), dout(no, BF16), datt(na, BF16);
    GPU->attention_kv_forward(dout.f(), datt.f(), dq.f(), ld, (float *)((trn__bf16 *)dq.p + NH * hs), (float *)((trn__bf16 *)dq.p + NH * hs + Ckv),
                              ld, dkc.f(), dvc.f(), B, T, pos, maxT, NH, NKV, hs);
    CHECK(maxdiff(dkc.get(), kc_r) == 0 && maxdiff(dvc.get(), vc_r) == 0, "attention_kv: the caches differ\n");
    /* (pos = 0: no earlier rows, so that wrong result is the right one) */
    snprintf(name, sizeof name, "attention_kv att T=%d pos=%d %d/%d", T, pos, NH, NKV);
    expect(name, datt.get(), att, tol_softmax(att, M), pos ? &watt : NULL, e0);
    snprintf(name, sizeof name, "attention_kv out T=%d pos=%d %d/%d", T, pos, NH, NKV);
    expect(name, dout.get(), out, tol_pv(out, A, M, P), pos ? &wout : NULL, e0);
}

/* ------------------------------------------------------- >>mlp: matmul + GELU
   GPT-2's feed-forward: pre (N,H) = inp (N,Cm) w1^T + b1, out = gelu(pre)
   (matmul_gelu_forward), and backward through the GELU into c_proj:
   dpre (N,H) = (dout (N,Cm) @ w2 (Cm,H)) * gelu'(pre) (matmul_dgelu_backward).
   bf16 against the CPU's fp32 pair (matmul + gelu) on the same inputs.
   Tolerances: the GEMM's sum is off by at most K 2^-23 S (as above) and
   |gelu'| <= G = 1.13 (its maximum, near x = 2.4) carries that into out; out
   is rounded once (u |out|); where the epilogue cannot be used (H not a
   multiple of 8, pre not 16-byte aligned) out = gelu(pre) is computed from
   the ROUNDED pre, one more u |pre| through gelu' (the same for dgelu:
   round(acc), then the product rounded). 2^-20 |x| covers fp32 gelu
   evaluated in two ways (sigmoid form on the CPU, tanh form here).
   pre must be bit-equal to matmul_forward's output on the harness (aux and
   the BIAS epilogue's D are the same rounding of the same fp32 value), within
   one bf16 ulp on a GPU (another kernel may sum in another order). */
static const double G = 1.13;
static int bf16_ulps(float a, float b) { /* distance in bf16 steps */
    auto key = [](float x) {
        __nv_bfloat16 h = __float2bfloat16(x);
        unsigned short u;
        memcpy(&u, &h, 2); /* the bits (the GPU's type has no public field) */
        return u & 0x8000u ? -(int)(u & 0x7fffu) : (int)u;
    };
    return abs(key(a) - key(b));
}
static void test_mlp(int N, int Cm, int H, int with_bias, int misalign) {
    long e0 = harness_errors();
    char name[96], shape[48];
    int fused = H % 8 == 0 && !misalign;
    snprintf(shape, sizeof shape, "%dx%d->%d%s%s", N, Cm, H, with_bias ? " +bias" : "",
             fused ? " (epilogue)" : misalign ? " (unaligned pre: unfused)" : " (unfused)");
    vec inp = randbf((size_t)N * Cm), w1 = randbf((size_t)H * Cm, 0.3f), b1 = randbf((size_t)H);
    const float *b = with_bias ? b1.data() : NULL;
    size_t n = (size_t)N * H;
    vec pre(n), S(n), out(n, 0.0f), wrong(n);
    trn_matmul_forward(pre.data(), inp.data(), w1.data(), b, N, Cm, H);
    trn_matmul_forward(S.data(), absv(inp).data(), absv(w1).data(), with_bias ? absv(b1).data() : NULL, N, Cm, H);
    trn_gelu_forward(out.data(), pre.data(), n);
    vec nb(n); /* the product without the bias */
    trn_matmul_forward(nb.data(), inp.data(), w1.data(), NULL, N, Cm, H);
    vec tol(n);
    for (size_t i = 0; i < n; i++) /* on a GPU (LT_EXTRA): the product rounded before the bias, a GELU epilogue's ulp */
        tol[i] = (float)(U * fabs(out[i]) + G * (Cm * SUM * S[i] + (fused ? 0 : U * fabs(pre[i]))) +
                         fabs(pre[i]) / 1048576.0 +
                         LT_EXTRA * ((with_bias ? G * U * fabs(nb[i]) : 0.0) + (fused ? U * fabs(out[i]) : 0.0)));
    dbuf di(inp, BF16), dw1(w1, BF16), db1(b1, BF16), dout(n, BF16), dpre(n + 8, BF16), plain(n, BF16);
    float *pre_p = (float *)((trn__bf16 *)dpre.p + (misalign ? 1 : 0));
    GPU->matmul_forward(plain.f(), di.f(), dw1.f(), with_bias ? db1.f() : NULL, N, Cm, H);
#ifdef TRN_CUDA_ON_CPU
    long launches0 = cuemu::S().launches;
    long long lt0 = cuemu::lt_matmuls;
#endif
    GPU->matmul_gelu_forward(dout.f(), pre_p, di.f(), dw1.f(), with_bias ? db1.f() : NULL, N, Cm, H);
#ifdef TRN_CUDA_ON_CPU
    /* fused: one cuBLASLt GEMM and no kernel; unfused: the GEMM and one kernel */
    CHECK(cuemu::lt_matmuls == lt0 + 1 && cuemu::S().launches == launches0 + (fused ? 0 : 1),
          "matmul_gelu_forward %s: %lld cuBLASLt matmuls, %ld launches\n", shape, cuemu::lt_matmuls - lt0,
          cuemu::S().launches - launches0);
#endif
    vec got_pre(n), all = dpre.get(), ref_plain = plain.get();
    for (size_t i = 0; i < n; i++) got_pre[i] = all[i + (misalign ? 1 : 0)];
    int ulps = 0;
    for (size_t i = 0; i < n; i++) ulps = std::max(ulps, bf16_ulps(got_pre[i], ref_plain[i]));
#ifdef TRN_CUDA_ON_CPU
    const int max_ulps = 0;
#else
    const int max_ulps = 1;
#endif
    printf("matmul_gelu_forward pre vs matmul_forward: %d bf16 ulps apart (at most %d)\n", ulps, max_ulps);
    CHECK(ulps <= max_ulps, "matmul_gelu_forward %s: pre is %d ulps from matmul_forward's output\n", shape, ulps);
    /* wrong: no GELU (out = pre), or the bias forgotten */
    snprintf(name, sizeof name, "matmul_gelu_forward out %s", shape);
    expect(name, dout.get(), out, tol, &pre, e0);
    if (with_bias) {
        trn_gelu_forward(wrong.data(), nb.data(), n);
        CHECK(worst(dout.get(), wrong, tol) > 1.0, "matmul_gelu_forward %s: cannot tell a forgotten bias\n", shape);
    }

    /* backward: dpre (N,H) = (g (N,Cm) @ w2 (Cm,H)) * gelu'(pre), over a
       nonzero dpre (written, not accumulated), pre as the GPU saved it */
    vec g = randbf((size_t)N * Cm), w2 = randbf((size_t)Cm * H, 0.3f), d0 = randbf(n), dummy((size_t)N * H);
    vec acc(n, 0.0f), Sacc(n, 0.0f), ref(n, 0.0f);
    trn_matmul_backward(acc.data(), NULL, NULL, g.data(), dummy.data(), w2.data(), N, H, Cm);
    trn_matmul_backward(Sacc.data(), NULL, NULL, absv(g).data(), dummy.data(), absv(w2).data(), N, H, Cm);
    trn_gelu_backward(ref.data(), got_pre.data(), acc.data(), n);
    for (size_t i = 0; i < n; i++)
        tol[i] = (float)(U * fabs(ref[i]) + G * (Cm * SUM * Sacc[i] + (fused ? 0 : U * fabs(acc[i]))) +
                         fabs(acc[i]) * (1 + fabs(got_pre[i])) / 1048576.0 +
                         LT_EXTRA * (fused ? U * fabs(ref[i]) + G * U * fabs(acc[i]) : 0.0));
    dbuf dg(g, BF16), dw2(w2, BF16), ddpre(d0, BF16);
#ifdef TRN_CUDA_ON_CPU
    launches0 = cuemu::S().launches;
    lt0 = cuemu::lt_matmuls;
#endif
    GPU->matmul_dgelu_backward(ddpre.f(), dg.f(), dw2.f(), pre_p, N, H, Cm);
#ifdef TRN_CUDA_ON_CPU
    CHECK(cuemu::lt_matmuls == lt0 + 1 && cuemu::S().launches == launches0 + (fused ? 0 : 1),
          "matmul_dgelu_backward %s: %lld cuBLASLt matmuls, %ld launches\n", shape, cuemu::lt_matmuls - lt0,
          cuemu::S().launches - launches0);
#endif
    vec acc_ = ref;
    for (size_t i = 0; i < n; i++) acc_[i] = ref[i] + d0[i]; /* wrong: accumulated into dpre */
    snprintf(name, sizeof name, "matmul_dgelu_backward dpre %s", shape);
    expect(name, ddpre.get(), ref, tol, &acc_, e0);
    CHECK(worst(ddpre.get(), acc, tol) > 1.0, "matmul_dgelu_backward %s: cannot tell a missing gelu'\n", shape);
}

/* The epilogue's GELU itself, on inputs that make every other step exact:
   w = the 8x8 identity, no bias, so pre = inp exactly (bf16 values spread
   over [-5, 5]) and out = round(gelu(x)); backward with dout = 1 gives
   dpre = round(gelu'(x)). Compared with the tanh form in double: u |ref|
   (the rounding; 2 u on a GPU, LT_EXTRA above) + 2^-21 (1 + |x|^3) (fp32 evaluation: tanh near +-1
   loses bits to the cancellation in 1 + t and 1 - t^2). The erf form
   (PyTorch's default GELU) must NOT fit: that is what this test tells on a
   GPU about cuBLASLt's GELU epilogue. */
static double gelu_tanh_d(double x) { return 0.5 * x * (1 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))); }
static double gelu_tanh_grad_d(double x) {
    double t = tanh(0.7978845608028654 * (x + 0.044715 * x * x * x));
    return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * 0.7978845608028654 * (1 + 3 * 0.044715 * x * x);
}
static double gelu_erf_d(double x) { return 0.5 * x * (1 + erf(x / sqrt(2.0))); }
static double gelu_erf_grad_d(double x) { return 0.5 * (1 + erf(x / sqrt(2.0))) + x * exp(-0.5 * x * x) / 2.5066282746310002; }
static void test_gelu_formula(void) {
    long e0 = harness_errors();
    const int N = 160, C = 8;
    size_t n = (size_t)N * C;
    vec x(n), eye((size_t)C * C, 0.0f), ones(n, 1.0f), want(n), erfw(n), tol(n), dwant(n), derf(n), dtol(n);
    for (size_t i = 0; i < n; i++) x[i] = bf(-5.0f + 10.0f * (float)i / (float)(n - 1));
    for (int c = 0; c < C; c++) eye[(size_t)c * C + c] = 1.0f;
    for (size_t i = 0; i < n; i++) {
        double xi = x[i], slack = (1 + fabs(xi) * xi * xi) / 2097152.0;
        want[i] = bf((float)gelu_tanh_d(xi));
        erfw[i] = bf((float)gelu_erf_d(xi));
        tol[i] = (float)((1 + LT_EXTRA) * U * fabs(want[i]) + slack);
        dwant[i] = bf((float)gelu_tanh_grad_d(xi));
        derf[i] = bf((float)gelu_erf_grad_d(xi));
        dtol[i] = (float)((1 + LT_EXTRA) * U * fabs(dwant[i]) + slack);
    }
    dbuf dx(x, BF16), dI(eye, BF16), dout(n, BF16), dpre(n, BF16), dg(ones, BF16), dd(n, BF16);
    GPU->matmul_gelu_forward(dout.f(), dpre.f(), dx.f(), dI.f(), NULL, N, C, C);
    CHECK(maxdiff(dpre.get(), x) == 0, "gelu formula: pre is not the exact input\n");
    expect("epilogue GELU vs tanh form (erf form: wrong)", dout.get(), want, tol, &erfw, e0);
    GPU->matmul_dgelu_backward(dd.f(), dg.f(), dI.f(), dpre.f(), N, C, C);
    expect("epilogue DGELU vs tanh form (erf form: wrong)", dd.get(), dwant, dtol, &derf, e0);
}

/* fp32 and tf32: the same entries are the GEMM and one kernel, which must
   give the bits of the unfused table entries (matmul_forward then
   gelu_forward; matmul_backward into zeros then gelu_backward into zeros) */
static void test_mlp_fp32(trn_cuda_precision prec, int N, int Cm, int H) {
    long e0 = harness_errors();
    CHECK(trn_cuda_set_precision(prec) == TRN_OK, "set_precision: %s\n", trn_error_reason());
    CHECK(GPU->act_dtype == TRN_F32, "the table did not switch to fp32\n");
    size_t n = (size_t)N * H;
    vec inp = randbf((size_t)N * Cm), w1 = randbf((size_t)H * Cm, 0.3f), b1 = randbf((size_t)H);
    vec g = randbf((size_t)N * Cm), w2 = randbf((size_t)Cm * H, 0.3f), d0 = randbf(n), zeros(n, 0.0f);
    dbuf di(inp, F32), dw1(w1, F32), db1(b1, F32), out(n, F32), pre(n, F32), out2(n, F32), pre2(n, F32);
    GPU->matmul_gelu_forward(out.f(), pre.f(), di.f(), dw1.f(), db1.f(), N, Cm, H);
    GPU->matmul_forward(pre2.f(), di.f(), dw1.f(), db1.f(), N, Cm, H);
    GPU->gelu_forward(out2.f(), pre2.f(), n);
    CHECK(maxdiff(pre.get(), pre2.get()) == 0 && maxdiff(out.get(), out2.get()) == 0,
          "%s matmul_gelu_forward: differs from matmul_forward + gelu_forward (pre %g, out %g)\n",
          trn_cuda_precision_name(prec), maxdiff(pre.get(), pre2.get()), maxdiff(out.get(), out2.get()));
    dbuf dg(g, F32), dw2(w2, F32), dpre(d0, F32), scratch(zeros, F32), dpre2(zeros, F32);
    GPU->matmul_dgelu_backward(dpre.f(), dg.f(), dw2.f(), pre.f(), N, H, Cm);
    GPU->matmul_backward(scratch.f(), NULL, NULL, dg.f(), pre.f(), dw2.f(), N, H, Cm);
    GPU->gelu_backward(dpre2.f(), pre.f(), scratch.f(), n);
    vec a = dpre.get(), bb = dpre2.get();
    CHECK(maxdiff(a, bb) == 0, "%s matmul_dgelu_backward: differs from matmul_backward + gelu_backward by %g\n",
          trn_cuda_precision_name(prec), maxdiff(a, bb));
    CHECK(maxdiff(a, scratch.get()) > 0.01, "%s matmul_dgelu_backward: gelu' not applied?\n",
          trn_cuda_precision_name(prec));
    /* and the CPU's fp32 pair, within the sums' reordering */
    vec rpre(n), rout(n), rS(n);
    trn_matmul_forward(rpre.data(), inp.data(), w1.data(), b1.data(), N, Cm, H);
    trn_matmul_forward(rS.data(), absv(inp).data(), absv(w1).data(), absv(b1).data(), N, Cm, H);
    trn_gelu_forward(rout.data(), rpre.data(), n);
    vec tol(n);
    /* tf32 rounds both inputs to 11 significant bits: a product within 2^-10 of exact */
    double tf = prec == TRN_CUDA_TF32 ? 1.0 / 1024 : 0;
    for (size_t i = 0; i < n; i++) tol[i] = (float)(G * (Cm * SUM + tf) * rS[i] + fabs(rpre[i]) / 1048576.0);
    printf("%s ", trn_cuda_precision_name(prec));
    expect("matmul_gelu_forward out vs CPU", out.get(), rout, tol, &rpre, e0);
    CHECK(harness_errors() == e0, "fp32 mlp: harness errors\n");
    CHECK(trn_cuda_set_precision(TRN_CUDA_BF16) == TRN_OK, "set_precision: %s\n", trn_error_reason());
}

#ifdef TRN_CUDA_ON_CPU
/* ------------------------------------------------ the harness's bf16 GEMMs */
static void test_harness(void) {
    cublasHandle_t h = (cublasHandle_t)trn_cuda_cublas();
    float one = 1.0f, zero = 0.0f;
    long e0 = harness_errors();
    /* rounding once, to nearest even: 1 + 2^-8 is halfway between 1 and
       1 + 2^-7 and goes to 1 (even); 1 + 3 2^-8 goes to 1 + 2^-6 */
    vec a = {1.0f, 1.0f / 256, 1.0f, 3.0f / 256}, b = {1.0f, 1.0f};
    dbuf da(a, BF16), db(b, BF16), c16(2, BF16), c32(2, F32);
    CHECK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, 2, 1, 2, &one, da.p, CUDA_R_16BF, 2, db.p, CUDA_R_16BF, 2, &zero,
                       c16.p, CUDA_R_16BF, 2, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS,
          "cublasGemmEx bf16 -> bf16\n");
    vec r = c16.get();
    CHECK(r[0] == 1.0f && r[1] == 1.015625f, "bf16 C: %.9g %.9g, want 1 and 1.015625 (ties to even)\n", r[0], r[1]);
    CHECK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, 2, 1, 2, &one, da.p, CUDA_R_16BF, 2, db.p, CUDA_R_16BF, 2, &zero,
                       c32.p, CUDA_R_32F, 2, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS,
          "cublasGemmEx bf16 -> fp32\n");
    r = c32.get();
    CHECK(r[0] == 1.00390625f && r[1] == 1.01171875f, "fp32 C: %.9g %.9g, exact sums\n", r[0], r[1]);
    /* what cuBLAS does not offer is refused */
    CHECK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, 2, 1, 2, &one, da.p, CUDA_R_16BF, 2, db.p, CUDA_R_16BF, 2, &zero,
                       c16.p, CUDA_R_16BF, 2, CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_NOT_SUPPORTED,
          "bf16 with FAST_TF32 must be refused\n");
    CHECK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, 2, 1, 2, &one, da.p, CUDA_R_16BF, 2, c32.p, CUDA_R_32F, 2, &zero,
                       c32.p, CUDA_R_32F, 2, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_NOT_SUPPORTED,
          "mixed bf16 A and fp32 B must be refused\n");
    CHECK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, 2, 1, 2, &one, da.p, CUDA_R_16BF, 2, db.p, CUDA_R_16BF, 2, &zero,
                       c16.p, CUDA_R_16F, 2, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_NOT_SUPPORTED,
          "an fp16 C must be refused\n");
    CHECK(harness_errors() == e0, "refusals are statuses, not harness errors\n");

    /* cuBLASLt: D (3,2) = A (3,4) B (4,2) + bias, bf16, through the same
       steps as train_cuda.h; then each wrong argument alone */
    cublasLtHandle_t lt;
    CHECK(cublasLtCreate(&lt) == CUBLAS_STATUS_SUCCESS, "cublasLtCreate\n");
    vec A = randbf(12), B = randbf(8), bias = randbf(3), want(6);
    for (int j = 0; j < 2; j++)
        for (int i = 0; i < 3; i++) {
            float s = 0;
            for (int l = 0; l < 4; l++) s += A[i + l * 3] * B[l + j * 4];
            want[i + j * 3] = bf(s + bias[i]);
        }
    dbuf dA(A, BF16), dB(B, BF16), dD(6, BF16), dbias(bias, BF16), ws(1 << 20, F32);
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, ld, lk;
    cublasLtMatmulPreference_t pref;
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    uint32_t epi = CUBLASLT_EPILOGUE_BIAS;
    int32_t t16 = CUDA_R_16BF, t32 = CUDA_R_32F;
    uint64_t max_ws = 4 << 20;
    const void *bp = dbias.p;
    cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi);
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bp, sizeof bp);
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &t16, sizeof t16);
    cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, 3, 4, 3);
    cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, 4, 2, 4);
    cublasLtMatrixLayoutCreate(&ld, CUDA_R_16BF, 3, 2, 3);
    cublasLtMatrixLayoutCreate(&lk, CUDA_R_16BF, 5, 2, 5); /* B with the wrong k */
    cublasLtMatmulPreferenceCreate(&pref);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_ws, sizeof max_ws);
    CHECK(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, ld, ld, pref, 1, &res, &found) == CUBLAS_STATUS_SUCCESS &&
              found == 1 && res.workspaceSize > 0,
          "heuristic: found %d\n", found);
    CHECK(cublasLtMatmul(lt, op, &one, dA.p, la, dB.p, lb, &zero, dD.p, ld, dD.p, ld, &res.algo, ws.p, ws.bytes(),
                         NULL) == CUBLAS_STATUS_SUCCESS,
          "cublasLtMatmul\n");
    CHECK(maxdiff(dD.get(), want) <= 1e-6 * 8, "cublasLtMatmul with bias: max diff %g\n", maxdiff(dD.get(), want));
    CHECK(harness_errors() == e0, "the valid cuBLASLt calls made harness errors\n");
    /* bad arguments: INVALID_VALUE and a harness error each */
    CHECK(cublasLtMatmul(lt, op, &one, dA.p, la, dB.p, lb, &zero, dD.p, ld, dD.p, ld, &res.algo, NULL, 0, NULL) ==
              CUBLAS_STATUS_INVALID_VALUE,
          "less workspace than the algorithm asked for must be refused\n");
    CHECK(cublasLtMatmul(lt, op, &one, dA.p, la, dB.p, lk, &zero, dD.p, ld, dD.p, ld, &res.algo, ws.p, ws.bytes(),
                         NULL) == CUBLAS_STATUS_INVALID_VALUE,
          "layouts that do not fit must be refused\n");
    CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, 8) == CUBLAS_STATUS_INVALID_VALUE,
          "an attribute of the wrong size must be refused\n");
    CHECK(harness_errors() == e0 + 3, "3 bad arguments, %ld harness errors\n", harness_errors() - e0);
    /* combinations the library does not run: NOT_SUPPORTED */
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &t32, sizeof t32);
    CHECK(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, ld, ld, pref, 1, &res, &found) == CUBLAS_STATUS_NOT_SUPPORTED &&
              found == 0,
          "an fp32 bias for a bf16 D must be refused\n");
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &t16, sizeof t16);
    epi = CUBLASLT_EPILOGUE_GELU_BIAS;
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi);
    CHECK(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, ld, ld, pref, 1, &res, &found) == CUBLAS_STATUS_NOT_SUPPORTED,
          "an epilogue the emulation does not have must be refused\n");
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(lk);
    cublasLtMatrixLayoutDestroy(ld);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatmulDescDestroy(op);
    cublasLtDestroy(lt);
}
#endif

#ifdef TRN_CUDA_ON_CPU
/* the harness's bias-gradient epilogues, BGRADA and BGRADB, for each
   transpose of their operand: D = op(A) op(B) (fp32 D from bf16 A, B) as
   without them, and the bias gradient written, in D's type: BGRADA the
   sums over k of op(A)'s rows (m values), BGRADB of op(B)'s columns (n
   values), each against the column sums written out here; alpha != 1 is
   refused (the header does not say whether alpha scales them) */
static void test_harness_bgrad(void) {
    const int m = 5, n = 7, k = 9;
    float one = 1.0f, two = 2.0f, zero = 0.0f;
    long e0 = harness_errors();
    cublasLtHandle_t lt;
    CHECK(cublasLtCreate(&lt) == CUBLAS_STATUS_SUCCESS, "cublasLtCreate\n");
    for (int which = 0; which < 2; which++)     /* 0: BGRADA, 1: BGRADB */
        for (int t = 0; t < 2; t++) {           /* the operand's transpose */
            int ta = which == 0 ? t : 0, tb = which == 1 ? t : 0;
            vec A = randbf((size_t)m * k), B = randbf((size_t)k * n);
            /* A stored (m,k) col-major when op N, (k,m) when op T; B (k,n) or (n,k) */
            int lda = ta ? k : m, ldb = tb ? n : k;
            auto opA = [&](int i, int l) { return ta ? A[(size_t)l + (size_t)i * lda] : A[(size_t)i + (size_t)l * lda]; };
            auto opB = [&](int l, int j) { return tb ? B[(size_t)j + (size_t)l * ldb] : B[(size_t)l + (size_t)j * ldb]; };
            int len = which == 0 ? m : n;
            vec want_d((size_t)m * n), want_b((size_t)len, 0.0f), S_b((size_t)len, 0.0f);
            for (int j = 0; j < n; j++)
                for (int i = 0; i < m; i++) {
                    float s = 0;
                    for (int l = 0; l < k; l++) s += opA(i, l) * opB(l, j);
                    want_d[(size_t)i + (size_t)j * m] = s;
                }
            for (int i = 0; i < len; i++)
                for (int l = 0; l < k; l++) {
                    float v = which == 0 ? opA(i, l) : opB(l, i);
                    want_b[(size_t)i] += v;
                    S_b[(size_t)i] += fabsf(v);
                }
            vec nan_b((size_t)len, NAN); /* written, never read: NaN shows a read */
            dbuf dA(A, BF16), dB(B, BF16), dD((size_t)m * n, F32), dbias(nan_b, F32), ws(1 << 20, F32);
            cublasLtMatmulDesc_t op;
            cublasLtMatrixLayout_t la, lb, ld;
            cublasLtMatmulPreference_t pref;
            cublasLtMatmulHeuristicResult_t res;
            int found = 0;
            uint64_t max_ws = 4 << 20;
            uint32_t epi = which == 0 ? CUBLASLT_EPILOGUE_BGRADA : CUBLASLT_EPILOGUE_BGRADB;
            int32_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
            void *bp = dbias.p;
            cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
            cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa);
            cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb);
            cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi);
            cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bp, sizeof bp);
            cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, ta ? k : m, ta ? m : k, lda);
            cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, tb ? n : k, tb ? k : n, ldb);
            cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, m, n, m);
            cublasLtMatmulPreferenceCreate(&pref);
            cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_ws, sizeof max_ws);
            cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, ld, ld, pref, 1, &res, &found);
            if (st == CUBLAS_STATUS_SUCCESS)
                st = cublasLtMatmul(lt, op, &one, dA.p, la, dB.p, lb, &zero, dD.p, ld, dD.p, ld, &res.algo, ws.p,
                                    ws.bytes(), NULL);
            char name[64];
            snprintf(name, sizeof name, "harness %s, op %s: status", which == 0 ? "BGRADA" : "BGRADB", t ? "T" : "N");
            CHECK(st == CUBLAS_STATUS_SUCCESS && found == 1, "%s %d\n", name, (int)st);
            vec tol_d((size_t)m * n, 1e-5f), tol_b((size_t)len);
            for (int i = 0; i < len; i++) tol_b[(size_t)i] = (float)(k * SUM * S_b[(size_t)i]);
            vec other((size_t)len); /* wrong: the other operand's sums (or zeros, when the lengths differ) */
            for (int i = 0; i < len && i < (which == 0 ? n : m); i++)
                for (int l = 0; l < k; l++) other[(size_t)i] += which == 0 ? opB(l, i) : opA(i, l);
            snprintf(name, sizeof name, "harness %s op %s: D", which == 0 ? "BGRADA" : "BGRADB", t ? "T" : "N");
            expect(name, dD.get(), want_d, tol_d, NULL, e0);
            snprintf(name, sizeof name, "harness %s op %s: bias gradient", which == 0 ? "BGRADA" : "BGRADB", t ? "T" : "N");
            expect(name, dbias.get(), want_b, tol_b, &other, e0);
            /* alpha 2: not documented for the bias gradient, refused */
            if (which == 1 && t == 1)
                CHECK(cublasLtMatmul(lt, op, &two, dA.p, la, dB.p, lb, &zero, dD.p, ld, dD.p, ld, &res.algo, ws.p,
                                     ws.bytes(), NULL) == CUBLAS_STATUS_NOT_SUPPORTED,
                      "BGRADB with alpha 2 must be refused\n");
            cublasLtMatmulPreferenceDestroy(pref);
            cublasLtMatrixLayoutDestroy(ld);
            cublasLtMatrixLayoutDestroy(lb);
            cublasLtMatrixLayoutDestroy(la);
            cublasLtMatmulDescDestroy(op);
        }
    CHECK(harness_errors() == e0, "the BGRAD epilogues made %ld harness errors\n", harness_errors() - e0);
    cublasLtDestroy(lt);
}
#endif

#ifdef TRN_CUDA_ON_CPU
/* the harness's GELU epilogues, one call each through the same steps as
   train_cuda.h, against the formula written out here in fp32 (what the kit
   expects: aux = round(v), D = round(gelu(v)); DGELU D = round(acc gelu'(aux))),
   bit for bit; then the library's checks on aux */
static float gelu_f(float x) { return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x))); }
static float gelu_grad_f(float x) {
    float t = tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x));
    return 0.5f * (1.0f + t) + 0.5f * x * ((1.0f - t * t) * 0.7978845608028654f * (1.0f + 3.0f * 0.044715f * x * x));
}
static cublasStatus_t lt_call(cublasLtHandle_t lt, uint32_t epi, const dbuf &A, const dbuf &B, dbuf &D, int m, int n,
                              int k, const void *bias, const void *aux, int64_t aux_ld, float beta) {
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, ld;
    cublasLtMatmulPreference_t pref;
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    uint64_t max_ws = 4 << 20;
    float one = 1.0f;
    dbuf ws(1 << 20, F32);
    cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi);
    if (bias) cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux);
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof aux_ld);
    cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, m, k, m);
    cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, k, n, k);
    cublasLtMatrixLayoutCreate(&ld, CUDA_R_16BF, m, n, m);
    cublasLtMatmulPreferenceCreate(&pref);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_ws, sizeof max_ws);
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, ld, ld, pref, 1, &res, &found);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmul(lt, op, &one, A.p, la, B.p, lb, &beta, D.p, ld, D.p, ld, &res.algo, ws.p, ws.bytes(), NULL);
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(ld);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatmulDescDestroy(op);
    return st;
}
static void test_harness_gelu(void) {
    long e0 = harness_errors();
    const int m = 8, n = 3, k = 5;
    cublasLtHandle_t lt;
    CHECK(cublasLtCreate(&lt) == CUBLAS_STATUS_SUCCESS, "cublasLtCreate\n");
    vec A = randbf((size_t)m * k), B = randbf((size_t)k * n), bias = randbf(m), g = randbf((size_t)m * n);
    vec v((size_t)m * n), want_aux(v.size()), want_d(v.size()), want_dg(v.size());
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            float s = 0;
            for (int l = 0; l < k; l++) s += A[i + l * m] * B[l + j * k];
            size_t e = i + (size_t)j * m;
            v[e] = s + bias[i];
            want_aux[e] = bf(v[e]);
            want_d[e] = bf(gelu_f(v[e]));
            want_dg[e] = bf(s * gelu_grad_f(g[e])); /* DGELU: acc (no bias) times gelu'(aux = g) */
        }
    dbuf dA(A, BF16), dB(B, BF16), dbias(bias, BF16), dD(v.size(), BF16), daux(v.size(), BF16), dg(g, BF16);
    CHECK(lt_call(lt, CUBLASLT_EPILOGUE_GELU_AUX_BIAS, dA, dB, dD, m, n, k, dbias.p, daux.p, m, 0.0f) ==
              CUBLAS_STATUS_SUCCESS, "GELU_AUX_BIAS\n");
    CHECK(maxdiff(daux.get(), want_aux) == 0 && maxdiff(dD.get(), want_d) == 0,
          "GELU_AUX_BIAS: aux off by %g, D off by %g (bit-exact expected)\n", maxdiff(daux.get(), want_aux),
          maxdiff(dD.get(), want_d));
    CHECK(lt_call(lt, CUBLASLT_EPILOGUE_DGELU, dA, dB, dD, m, n, k, NULL, dg.p, m, 0.0f) == CUBLAS_STATUS_SUCCESS,
          "DGELU\n");
    CHECK(maxdiff(dD.get(), want_dg) == 0, "DGELU: D off by %g (bit-exact expected)\n", maxdiff(dD.get(), want_dg));
    CHECK(harness_errors() == e0, "the valid GELU epilogue calls made harness errors\n");
    /* the library's rules: INVALID_VALUE and a harness error each */
    CHECK(lt_call(lt, CUBLASLT_EPILOGUE_GELU_AUX_BIAS, dA, dB, dD, m, n, k, dbias.p, daux.p, 12, 0.0f) ==
              CUBLAS_STATUS_INVALID_VALUE, "an aux ld that is not a multiple of 8 must be refused\n");
    CHECK(lt_call(lt, CUBLASLT_EPILOGUE_GELU_AUX, dA, dB, dD, m, n, k, NULL, daux.p, 0, 0.0f) ==
              CUBLAS_STATUS_INVALID_VALUE, "an aux ld below D's rows (0: not set) must be refused\n");
    CHECK(lt_call(lt, CUBLASLT_EPILOGUE_DGELU, dA, dB, dD, m, n, k, NULL, g.data(), m, 0.0f) ==
              CUBLAS_STATUS_INVALID_VALUE, "an aux in host memory must be refused\n");
    CHECK(harness_errors() == e0 + 3, "3 bad aux arguments, %ld harness errors\n",
          harness_errors() - e0);
    /* DGELU with beta != 0: not emulated (and not what the kit asks) */
    CHECK(lt_call(lt, CUBLASLT_EPILOGUE_DGELU, dA, dB, dD, m, n, k, NULL, dg.p, m, 1.0f) ==
              CUBLAS_STATUS_NOT_SUPPORTED, "DGELU with beta 1 must be refused\n");
    cublasLtDestroy(lt);

    /* train_cuda.h itself refuses a GELU epilogue with a bad aux ld: its
       callers check trn__cuda_lt_aux_ok and take the unfused path instead */
    struct bad_aux { void *A, *B, *D, *aux; int n, k; } bad = {dA.p, dB.p, dD.p, daux.p, n, k};
    char buf[1024];
    check_fatal("trn__cuda_lt_gemm with aux ld 5", [](void *p) {
        bad_aux *b = (bad_aux *)p;
        trn__cuda_lt_gemm<trn__bf16>(__FILE__, __LINE__, CUBLAS_OP_N, CUBLAS_OP_N, 5, b->n, b->k, (trn__bf16 *)b->A, 5,
                                     (trn__bf16 *)b->B, b->k, 0.0f, (trn__bf16 *)b->D, 5, TRN__LT_GELU, NULL,
                                     (trn__bf16 *)b->aux);
    }, &bad, "multiple of 8", "ld 5", buf, sizeof buf);
    printf("refused: %s", buf);
}
#endif

int main(int argc, char **argv) {
    uint64_t seed = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--seed") && i + 1 < argc) seed = strtoull(argv[++i], NULL, 10);
        else { fprintf(stderr, "usage: %s [--seed N]\n", argv[0]); return 2; }
    }
    trn_rng_seed(&RNG, seed);
    trn_set_threads(1); /* the CPU reference */
    if (trn_cuda_init(0) != TRN_OK) {
        printf("no CUDA device (%s): nothing to test\n", trn_error_reason());
        return check_summary();
    }
    CHECK(trn_cuda_set_precision(TRN_CUDA_BF16) == TRN_OK, "set_precision: %s\n", trn_error_reason());
    GPU = trn_cuda_backend();
    CHECK(GPU->act_dtype == TRN_BF16, "the backend's activations are not bf16\n");
    printf("device: %s, precision %s\n", trn_cuda_device_name(), trn_cuda_precision_name(trn_cuda_get_precision()));
    test_matmul(37, 53, 29, 1);
    test_matmul(5, 200, 7, 0);  /* long sums, no bias */
    test_matmul(70, 19, 45, 1); /* N past a 64-row chunk of the column sums */
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) test_bmm(3, 7, 5, 9, ta, tb);
    test_bmm(2, 13, 17, 40, 0, 1);
    test_attention(2, 13, 3, 3, 10, 1);
    test_attention(2, 13, 3, 3, 10, 0);
    test_attention(3, 21, 2, 2, 12, 1); /* B > NH: the GEMMs batch over b */
    test_attention(2, 19, 4, 2, 9, 1);  /* grouped-query */
    test_attention_kv(2, 1, 9, 16, 4, 2, 9);   /* one new token after 9 */
    test_attention_kv(2, 5, 6, 16, 3, 3, 10);  /* a chunk of 5 after 6 */
    test_attention_kv(1, 7, 0, 7, 4, 1, 12);   /* the prompt, the cache full */
    test_mlp(37, 53, 24, 1, 0);  /* the epilogue: H a multiple of 8 */
    test_mlp(5, 200, 16, 0, 0);  /* GELU_AUX without bias, long sums */
    test_mlp(29, 40, 21, 1, 0);  /* H odd: GEMM + kernel */
    test_mlp(13, 19, 16, 1, 1);  /* pre 2 bytes off alignment: GEMM + kernel */
    test_gelu_formula();
    test_mlp_fp32(TRN_CUDA_FP32, 21, 19, 24);
    test_mlp_fp32(TRN_CUDA_TF32, 21, 19, 24);
    test_mlp_fp32(TRN_CUDA_FP32, 7, 19, 21); /* H odd: the bias + GELU one element at a time */
#ifdef TRN_CUDA_ON_CPU
    test_harness();
    test_harness_gelu();
    test_harness_bgrad();
    printf("harness: %ld launches, %lld GEMMs, %ld errors (6 on purpose)\n", cuemu::S().launches, cuemu::gemms,
           cuemu::errors());
#endif
    trn_cuda_shutdown();
    return check_summary();
}
