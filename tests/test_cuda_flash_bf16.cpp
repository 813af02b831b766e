// build: -O1 -g1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined -Wno-maybe-uninitialized
/* tests/test_cuda_flash_bf16.cpp - the WMMA bf16 fused attention of
   train_cuda.h (tensor cores through nvcuda::wmma; since the FA2 kernels
   became the default, selected with trn_cuda_set_flash(TRN_CUDA_FLASH_WMMA, 0)
   for comparison; the FA2 ones are tests/test_cuda_fa2_bf16's) against train.h's fp32 fused CPU
   attention, and the harness's emulation of wmma.

   Built by g++ with tests/cuda_on_cpu.h (ASan + UBSan, see the build line):
   the kernels run on the CPU, each warp's wmma calls emulated as warp
   collectives (tests/cuda_on_cpu.h, "nvcuda::wmma").

   What is checked:
   1. wmma emulation: d = a b + c for every layout of a, b and c against a
      double product (bf16 products are exact in fp32; a sum of 16 of them
      plus c is within 32 ulps of fp32: tolerance 2^-19 relative to the sum
      of |terms|); the documented misuses are reported (pointer not 32-byte
      aligned, ldm not a multiple of 16 bytes, lanes that pass different
      pointers, half a warp calling a collective).
   2. flash_attention_forward/backward under TRN_CUDA_BF16 for T in {1, 17,
      64, 100} (not multiples of a tile), head sizes 32, 64, 128, causal and
      not, NH = 4 with NKV = 4, 2, 1 (grouped queries); fewer shapes at head
      sizes 16, 48, 80, 96, 112 and at 24 (no multiple of 16: the fp32-FMA
      kernels on bf16 storage, whose only roundings are the stores, well
      inside the same bound); against the fp32 CPU
      kernels on the same bf16-rounded inputs. The tolerances are argued
      from bf16's unit roundoff u = 2^-8 (8 significant bits, round to
      nearest even: a rounded value is within u of the value, relatively):
      forward   out = sum_j p_j v_j / l. The GPU rounds p to bf16 before P V
                (as FlashAttention does) and out once at the end; scores,
                max, l and lse are fp32. So |out - ref| <= u sum_j p_j |v_j|
                / l + u |ref| per element (the two roundings), and lse
                matches to fp32 (1e-5 + 1e-6 |lse|).
      backward  with the same out (rounded to bf16) and lse on both sides:
                dV_j = sum_i P_ij dO_i with P rounded to bf16;
                dK_j = scale sum_i dS_ij Q_i and dQ_i = scale sum_j dS_ij K_j
                with dS rounded to bf16; then dqkv (bf16) += in fp32 and one
                rounding. Bound: u sum |rounded term| + u |ref| per element,
                with P and dS computed here in double.
      (The final rounding applies to ref plus the first error, hence the
      factor 1 + u on the sums.)
      A further 1e-5 (1 + sum |term|) covers fp32 differences in summation
      order and expf (sums of up to ~200 terms: 200 * 2^-24 = 1.2e-5 of the
      sum of |terms| at most, in practice far less). Each result must also MISS a deliberately wrong answer
      (the other causal flag; a dqkv that was overwritten, not +=), so the
      tolerance is not so loose that it cannot fail.

   Run:  tests/bin/test_cuda_flash_bf16     (CUEMU_SEED=n: thread order) */
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

#include "tests/cuda_fixtures.h" /* vec, GPU, RNG, randn_bf, dbuf_bf (bf16 or fp32), worst */

static const double U = 1.0 / 256; /* bf16 unit roundoff */

/* ------------------------------------------------- 1. the wmma emulation */
namespace wm = nvcuda::wmma;
/* d = a b + c with a (16x16 at lda), b, c as the template says */
template <class LA, class LB>
static __global__ void k_wmma(float *d, const trn__bf16 *a, const trn__bf16 *b, const float *c, unsigned lda,
                              unsigned ldb, unsigned ldc, int c_col) {
    wm::fragment<wm::matrix_a, 16, 16, 16, trn__bf16, LA> fa;
    wm::fragment<wm::matrix_b, 16, 16, 16, trn__bf16, LB> fb;
    wm::fragment<wm::accumulator, 16, 16, 16, float> fc;
    wm::load_matrix_sync(fa, a, lda);
    wm::load_matrix_sync(fb, b, ldb);
    wm::load_matrix_sync(fc, c, ldc, c_col ? wm::mem_col_major : wm::mem_row_major);
    wm::mma_sync(fc, fa, fb, fc);
    for (int e = 0; e < fc.num_elements; e++) fc.x[e] *= 2.0f; /* the same op on every element: allowed */
    wm::store_matrix_sync(d, fc, ldc, c_col ? wm::mem_col_major : wm::mem_row_major);
}

template <class LA, class LB> static void test_wmma_layout(int c_col) {
    const unsigned lda = 24, ldb = 40, ldc = 20; /* padded strides, multiples of 16 bytes */
    long e0 = harness_errors();
    int acol = std::is_same<LA, wm::col_major>::value, bcol = std::is_same<LB, wm::col_major>::value;
    vec a = randn_bf(16 * lda), b = randn_bf(16 * ldb), c = randn_bf(16 * ldc);
    dbuf_bf da(a, 1), db(b, 1), dc(c, 0), dd(vec(16 * ldc, 0.0f), 0);
    TRN_CUDA_LAUNCH((k_wmma<LA, LB>), dim3(1), dim3(32), 0, trn__cu.stream, dd.f(), (const trn__bf16 *)da.p,
                    (const trn__bf16 *)db.p, dc.f(), lda, ldb, ldc, c_col);
    vec d = dd.get();
    double w = 0;
    for (int r = 0; r < 16; r++)
        for (int col = 0; col < 16; col++) {
            size_t ic = c_col ? (size_t)col * ldc + r : (size_t)r * ldc + col;
            double s = c[ic], abs_s = fabs(c[ic]);
            for (int k = 0; k < 16; k++) {
                double x = acol ? a[(size_t)k * lda + r] : a[(size_t)r * lda + k];
                double y = bcol ? b[(size_t)col * ldb + k] : b[(size_t)k * ldb + col];
                s += x * y;
                abs_s += fabs(x * y);
            }
            double e = fabs(d[ic] - 2.0 * s) / (2.0 * abs_s * ldexp(1.0, -19) + 1e-30);
            if (!(e <= w)) w = e;
        }
    CHECK(w <= 1.0, "wmma a %s, b %s, c %s: error %.3g of the tolerance\n", acol ? "col" : "row",
          bcol ? "col" : "row", c_col ? "col" : "row", w);
    CHECK(harness_errors() == e0, "wmma: the harness reported %ld errors\n", harness_errors() - e0);
}

#ifdef TRN_CUDA_ON_CPU
/* misuses the harness must report: how = 1 misaligned pointer, 2 ldm of
   12 bf16 (24 bytes), 3 lanes with different pointers, 4 half a warp */
static __global__ void k_wmma_bad(float *d, const trn__bf16 *a, int how) {
    wm::fragment<wm::matrix_a, 16, 16, 16, trn__bf16, wm::row_major> fa;
    wm::fragment<wm::matrix_b, 16, 16, 16, trn__bf16, wm::row_major> fb;
    wm::fragment<wm::accumulator, 16, 16, 16, float> fc;
    int lane = threadIdx.x % 32;
    wm::fill_fragment(fc, 0.0f);
    wm::load_matrix_sync(fa, how == 1 ? a + 8 : how == 3 && lane == 5 ? a + 16 : a, how == 2 ? 12 : 16);
    wm::load_matrix_sync(fb, a, 16);
    if (how != 4 || lane < 16) wm::mma_sync(fc, fa, fb, fc);
    wm::store_matrix_sync(d, fc, 16, wm::mem_row_major);
}
static void test_wmma_misuse(void) {
    const char *what[] = {"", "a pointer not 32-byte aligned", "ldm of 24 bytes", "lanes with different pointers",
                          "half a warp at mma_sync"};
    dbuf_bf da(vec(16 * 16 + 16, 1.0f), 1), dd(vec(256, 0.0f), 0);
    for (int how = 1; how <= 4; how++) {
        long e0 = harness_errors();
        fprintf(stderr, "(expected: the harness reports %s)\n", what[how]);
        TRN_CUDA_LAUNCH(k_wmma_bad, dim3(1), dim3(64), 0, trn__cu.stream, dd.f(), (const trn__bf16 *)da.p, how);
        CHECK(harness_errors() > e0, "wmma misuse not reported: %s\n", what[how]);
    }
}
#endif

/* ------------------------------------------ 2. fused attention in bf16 */
static void test_flash(int B, int T, int NH, int NKV, int hs, int causal) {
    long e0 = harness_errors();
    int ld = (NH + 2 * NKV) * hs, C = NH * hs, G = NH / NKV;
    size_t nq = (size_t)B * T * ld, no = (size_t)B * T * C, nl = (size_t)B * NH * T;
    double scale = 1.0 / sqrt((double)hs);
    char shape[64];
    snprintf(shape, sizeof shape, "B=%d T=%d NH=%d NKV=%d hs=%d %s", B, T, NH, NKV, hs, causal ? "causal" : "full");

    /* forward */
    vec qkv = randn_bf(nq), out_c(no), lse_c(nl), out_w(no), lse_w(nl);
    trn_flash_attention_forward(out_c.data(), lse_c.data(), qkv.data(), B, T, NH, NKV, hs, causal);
    trn_flash_attention_forward(out_w.data(), lse_w.data(), qkv.data(), B, T, NH, NKV, hs, !causal); /* wrong */
    dbuf_bf dq(qkv, 1), dout(vec(no, 0.0f), 1), dlse(vec(nl, 0.0f), 0);
    GPU->flash_attention_forward(dout.f(), dlse.f(), dq.f(), B, T, NH, NKV, hs, causal);
    vec out_g = dout.get(), lse_g = dlse.get();
    /* the bound: u sum_j p_j |v_j| + u |ref| + fp32 slack, p from the CPU's lse */
    std::vector<double> tol_o(no), tol_l(nl);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < T; i++) {
                const float *q = &qkv[((size_t)b * T + i) * ld + (size_t)h * hs];
                double L = lse_c[((size_t)b * NH + h) * T + i];
                std::vector<double> acc((size_t)hs, 0.0);
                for (int j = 0; j <= (causal ? i : T - 1); j++) {
                    const float *k = &qkv[((size_t)b * T + j) * ld + (size_t)(NH + h / G) * hs];
                    const float *v = k + (size_t)NKV * hs;
                    double s = 0;
                    for (int d = 0; d < hs; d++) s += (double)q[d] * k[d];
                    double p = exp(scale * s - L);
                    for (int d = 0; d < hs; d++) acc[(size_t)d] += p * fabs(v[d]);
                }
                size_t o = ((size_t)b * T + i) * C + (size_t)h * hs;
                for (int d = 0; d < hs; d++)
                    tol_o[o + (size_t)d] =
                        U * ((1 + U) * acc[(size_t)d] + fabs(out_c[o + (size_t)d])) + 1e-5 * (acc[(size_t)d] + 1);
                tol_l[((size_t)b * NH + h) * T + i] = 1e-5 + 1e-6 * fabs(L);
            }
    double wo = worst(out_g, out_c, tol_o), wl = worst(lse_g, lse_c, tol_l);
    CHECK(wo <= 1 && wl <= 1, "flash forward bf16 %s: error %.3g (out), %.3g (lse) of the tolerance\n", shape, wo, wl);
    if (T > 1)
        CHECK(worst(out_g, out_w, tol_o) > 1, "flash forward bf16 %s: also passes against the other mask\n", shape);
    printf("flash bf16 %-40s forward  %.3f of tol (out), %.3f (lse)\n", shape, wo, wl);

    /* backward, from the CPU's out rounded to bf16 and its lse, into a
       dqkv that holds values already (backward accumulates) */
    vec out_r(no);
    for (size_t n = 0; n < no; n++) out_r[n] = bf(out_c[n]);
    vec g = randn_bf(no), dqkv0 = randn_bf(nq), dqkv_c = dqkv0;
    trn_flash_attention_backward(dqkv_c.data(), g.data(), qkv.data(), out_r.data(), lse_c.data(), B, T, NH, NKV, hs,
                                 causal);
    dbuf_bf dg(g, 1), dor(out_r, 1), dl(lse_c, 0), ddq(dqkv0, 1);
    GPU->flash_attention_backward(ddq.f(), dg.f(), dq.f(), dor.f(), dl.f(), B, T, NH, NKV, hs, causal);
    vec dqkv_g = ddq.get();
    /* the bound: u sum |rounded term| + u |ref| + fp32 slack */
    std::vector<double> acc(nq, 0.0), tol_d(nq);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < T; i++) {
                size_t rq = ((size_t)b * T + i) * ld, ro = ((size_t)b * T + i) * C + (size_t)h * hs;
                double L = lse_c[((size_t)b * NH + h) * T + i], D = 0;
                for (int d = 0; d < hs; d++) D += (double)g[ro + (size_t)d] * out_r[ro + (size_t)d];
                for (int j = 0; j <= (causal ? i : T - 1); j++) {
                    size_t rk = ((size_t)b * T + j) * ld + (size_t)(NH + h / G) * hs, rv = rk + (size_t)NKV * hs;
                    double s = 0, dp = 0;
                    for (int d = 0; d < hs; d++) {
                        s += (double)qkv[rq + (size_t)h * hs + (size_t)d] * qkv[rk + (size_t)d];
                        dp += (double)g[ro + (size_t)d] * qkv[rv + (size_t)d];
                    }
                    double p = exp(scale * s - L), ds = fabs(p * (dp - D));
                    for (int d = 0; d < hs; d++) {
                        acc[rq + (size_t)h * hs + (size_t)d] += scale * ds * fabs(qkv[rk + (size_t)d]);
                        acc[rk + (size_t)d] += scale * ds * fabs(qkv[rq + (size_t)h * hs + (size_t)d]);
                        acc[rv + (size_t)d] += p * fabs(g[ro + (size_t)d]);
                    }
                }
            }
    vec overwritten(nq);
    for (size_t n = 0; n < nq; n++) {
        tol_d[n] = U * ((1 + U) * acc[n] + fabs(dqkv_c[n])) + 1e-5 * (acc[n] + 1); /* the store rounds ref + error */
        overwritten[n] = dqkv_c[n] - dqkv0[n];
    }
    double wd = worst(dqkv_g, dqkv_c, tol_d);
    CHECK(wd <= 1, "flash backward bf16 %s: error %.3g of the tolerance\n", shape, wd);
    CHECK(worst(dqkv_g, overwritten, tol_d) > 1, "flash backward bf16 %s: also passes as if it overwrote dqkv\n",
          shape);
    printf("flash bf16 %-40s backward %.3f of tol\n", shape, wd);
    CHECK(harness_errors() == e0, "flash bf16 %s: the harness reported %ld errors\n", shape, harness_errors() - e0);
}

int main(int argc, char **argv) {
    uint64_t seed = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--seed") && i + 1 < argc) seed = strtoull(argv[++i], NULL, 10);
        else { fprintf(stderr, "usage: %s [--seed N]\n", argv[0]); return 2; }
    }
    trn_rng_seed(&RNG, seed);
    trn_set_threads(1);
    if (trn_cuda_init(0) != TRN_OK) {
        printf("no CUDA device (%s): nothing to test\n", trn_error_reason());
        return check_summary();
    }
    CHECK(trn_cuda_set_precision(TRN_CUDA_BF16) == TRN_OK, "trn_cuda_set_precision(bf16): %s\n", trn_error_reason());
    GPU = trn_cuda_backend();
    /* this test keeps the WMMA kernels covered (trn_cuda_set_flash); the
       FlashAttention-2 kernels, the default, are tests/test_cuda_fa2_bf16's */
    CHECK(trn_cuda_set_flash(TRN_CUDA_FLASH_WMMA, 0) == TRN_OK, "trn_cuda_set_flash(WMMA): %s\n", trn_error_reason());
    CHECK(GPU->act_dtype == TRN_BF16, "the bf16 table has act_dtype %d\n", (int)GPU->act_dtype);

    test_wmma_layout<wm::row_major, wm::row_major>(0);
    test_wmma_layout<wm::row_major, wm::col_major>(1);
    test_wmma_layout<wm::col_major, wm::row_major>(0);
    test_wmma_layout<wm::col_major, wm::col_major>(1);
#ifdef TRN_CUDA_ON_CPU
    test_wmma_misuse();
#endif

    /* every shape at head sizes 32, 64, 128; fewer at the other tensor-core
       instantiations (16, 48 = the mini preset's, 80, 96, 112) and at 24,
       which is no multiple of 16 and runs the fp32-FMA kernels on bf16 */
    const int Ts[] = {1, 17, 64, 100}, nkvs[] = {4, 2, 1};
    for (int hs : {32, 64, 128})
        for (int T : Ts)
            for (int causal = 0; causal < 2; causal++)
                for (int nkv : nkvs) test_flash(T == 17 ? 2 : 1, T, 4, nkv, hs, causal);
    for (int hs : {16, 48, 80, 96, 112, 24})
        for (int causal = 0; causal < 2; causal++) {
            test_flash(2, 17, 4, causal ? 2 : 1, hs, causal);
            test_flash(1, 100, 4, causal ? 4 : 2, hs, causal);
        }
    trn_cuda_shutdown();
    return check_summary();
}
