// build: -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined -Wno-maybe-uninitialized
/* tests/test_cuda_bf16_gemm.cpp - the GEMMs of train_cuda.h in bf16
   (TRN_CUDA_BF16): matmul (forward through cuBLASLt with the bias in its
   epilogue; backward with dinp in bf16 and dw, dbias in fp32), bmm, the
   materialized attention and attention over the KV cache. Each runs in bf16
   and is compared with the CPU backend's fp32 result on the SAME inputs,
   rounded to bf16 first, so that only the GPU path's own roundings differ.
   Then the harness's side (tests/cuda_on_cpu.h): cublasGemmEx's bf16
   rounding and the argument checks of the cuBLASLt emulation.

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
#define TRAIN_IMPLEMENTATION
#include "train.h"
#ifndef __CUDACC__
#include "tests/cuda_on_cpu.h"
#endif
#define TRAIN_CUDA_IMPLEMENTATION
#include "train_cuda.h"
#include "tests/check.h"

#include <string.h>
#include <vector>

typedef std::vector<float> vec;
static const trn_backend *GPU; /* the bf16 table */
static trn_rng RNG;
static const double U = 1.0 / 256;          /* bf16: 2^-8 per rounding        */
static const double SUM = 2.0 / 16777216.0; /* fp32: 2^-23 per term of a sum  */

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
    expect(name, dout.get(), ref, tol_sum(ref, S, C, 1), &wrong, e0);

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
#ifdef TRN_CUDA_ON_CPU
    test_harness();
    printf("harness: %ld launches, %lld GEMMs, %ld errors (3 on purpose)\n", cuemu::S().launches, cuemu::gemms,
           cuemu::errors());
#endif
    trn_cuda_shutdown();
    return check_summary();
}
