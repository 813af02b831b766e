// build: -O1 -g1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined -Wno-maybe-uninitialized
/* tests/test_cuda_fa2_bf16.cpp - the FlashAttention-2 kernels of
   train_cuda.h (>>cuda-fa2: mma.sync m16n8k16, ldmatrix, cp.async) against
   the materialized reference pair (train.h's trn_attention_forward/backward
   on the CPU), and the harness's emulation of those PTX instructions.

   Built by g++ with tests/cuda_on_cpu.h (ASan + UBSan): the kernels run on
   the CPU, each mma.sync and ldmatrix a warp collective, each cp.async
   queued until its wait_group (tests/cuda_on_cpu.h, "PTX"). Compiled by
   nvcc as tests/test_cuda_fa2_bf16_gpu.cu, the same checks run on a GPU.

   What is checked:
   1. fragment layouts: D = A B + C through ldmatrix (x1, x2, x4, with and
      without .trans) and mma.sync.m16n8k16, against a plain double product
      (bf16 products are exact; 16 of them plus c in fp32: 2^-19 relative to
      the sum of |terms|); a wrong layout moves elements and fails by O(1).
   2. cp.async: a tile copied with zero-fill, visible after wait_group 0;
      under the harness, the documented misuses are reported (a misaligned
      cp.async, a misaligned ldmatrix row, a copy never waited for) and a
      read before wait_group sees the old contents, not the copy.
   3. FA2 forward and backward (bf16) against the materialized fp32
      reference on the same bf16 inputs, every supported head size (16,
      32, ..., 128; others run the older kernels), T in {1, 17, 64, 100,
      129} (no multiple of a tile, one more than two tiles), causal and not,
      NH = 4 with NKV = 4, 2, 1 (GQA). The backward runs from the GPU's own
      forward (out, lse), as in training. Tolerances from bf16's unit
      roundoff u = 2^-8, as in tests/test_cuda_flash_bf16.cpp:
        out:  u sum_j p_j |v_j| / l + u |ref|  (+ fp32 slack)
        lse:  1e-5 + 1e-6 |lse|
        dqkv: u sum |term| + u |ref| (P and dS rounded to bf16, one rounding
              of the store), plus what the forward's error in out moves D =
              rowsum(dO out) by: |dD_i| <= sum_d |dO_id| tol(out_id), times
              scale sum_j P_ij |K_j| (dQ) and scale sum_i P_ij |Q_i| (dK).
      Each must MISS a deliberately wrong answer (the other causal flag; a
      dqkv overwritten instead of accumulated).
   4. the dQ modes: deterministic (the default) gives the same bits on two
      runs; atomic (trn_cuda_set_flash(FA2, 1)) passes the same bounds; the
      WMMA kernels (trn_cuda_set_flash(WMMA, 0)) pass them too (old vs new).
   5. a head size FA2 does not take (24) still runs (the fp32-FMA kernels).

   Run:  tests/bin/test_cuda_fa2_bf16     (CUEMU_SEED=n: thread order) */
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

/* ------------------------------------------------ 1. fragment layouts */
/* x1 and x2 (the kit's kernels use x4 only): the test's own wrappers */
#ifndef TRN_CUDA_ON_CPU
static __device__ void ldm_x1(unsigned *r, const void *p, int trans) {
    unsigned a = (unsigned)__cvta_generic_to_shared(p);
    if (trans) asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];\n" : "=r"(r[0]) : "r"(a));
    else asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n" : "=r"(r[0]) : "r"(a));
}
static __device__ void ldm_x2(unsigned *r, const void *p, int trans) {
    unsigned a = (unsigned)__cvta_generic_to_shared(p);
    if (trans)
        asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(a));
    else asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(a));
}
#else
static void ldm_x1(unsigned *r, const void *p, int trans) { cuemu::ldmatrix(r, 1, trans, p); }
static void ldm_x2(unsigned *r, const void *p, int trans) { cuemu::ldmatrix(r, 2, trans, p); }
#endif

/* d (16x8, row-major, fp32) = a (16x16) b (16x8) + c. a is row-major at
   stride 24; b is given either as B^T (8 x 16, row n = column n of B:
   ldmatrix without .trans) or as B (16 x 8 at stride 16: .trans); how
   picks the ldmatrix forms: 0 x4 + x2, 1 x4 + 2 x1 (halves of b), 2 four
   x1/x2 for a and x2 .trans for b. Shared memory: copied with cp.async. */
static __global__ void k_frag(float *d, const trn__bf16 *a, const trn__bf16 *b, const float *c, int how) {
    TRN__CUDA_SHARED_128(trn__bf16, sm);
    trn__bf16 *As = sm, *Bs = sm + 16 * 24; /* A: 16 rows of 24; B: 16 rows of 16 (or B^T 8 x 16) */
    int lane = threadIdx.x;
    for (int idx = lane; idx < 16 * 3; idx += 32) trn__cp_async16(As + idx * 8, a + idx * 8, 16);
    for (int idx = lane; idx < 16; idx += 32) trn__cp_async16(Bs + idx * 8, b + idx * 8, 16);
    trn__cp_async_commit();
    trn__cp_async_wait<0>();
    __syncwarp();
    unsigned fa[4], fb[2];
    int g = lane / 4, t = lane % 4;
    if (how < 2) {
        trn__ldmatrix_x4(fa, As + (lane % 8 + (lane / 8) % 2 * 8) * 24 + lane / 16 * 8);
    } else { /* tile by tile: x2 for the left half (rows 0-7, 8-15 of cols 0-7), x1 twice for the right */
        unsigned lo[2], r2, r3;
        ldm_x2(lo, As + (lane % 8 + (lane / 8) % 2 * 8) * 24, 0);
        ldm_x1(&r2, As + (lane % 8) * 24 + 8, 0);
        ldm_x1(&r3, As + (lane % 8 + 8) * 24 + 8, 0);
        fa[0] = lo[0]; fa[1] = lo[1]; fa[2] = r2; fa[3] = r3;
    }
    if (how == 0) ldm_x2(fb, Bs + (lane % 8) * 16 + (lane / 8) % 2 * 8, 0);      /* B^T rows n, cols k */
    else if (how == 1) { ldm_x1(fb, Bs + (lane % 8) * 16, 0); ldm_x1(fb + 1, Bs + (lane % 8) * 16 + 8, 0); }
    else ldm_x2(fb, Bs + (lane % 16) * 8, 1);                                   /* B rows k (stride 8), .trans */
    float acc[4];
    for (int e = 0; e < 4; e++) acc[e] = c[(g + e / 2 * 8) * 8 + 2 * t + e % 2];
    trn__mma_bf16(acc, fa, fb);
    for (int e = 0; e < 4; e++) d[(g + e / 2 * 8) * 8 + 2 * t + e % 2] = acc[e];
}
static void test_fragments(void) {
    for (int how = 0; how < 3; how++) {
        long e0 = harness_errors();
        vec a = randn_bf(16 * 24), bm = randn_bf(128), c = randn_bf(128);
        /* B (k, n): how < 2 stores B^T (row n: 16 k's), how 2 stores B (row k: 8 n's) */
        auto B = [&](int k, int n) -> double { return how < 2 ? bm[(size_t)n * 16 + k] : bm[(size_t)k * 8 + n]; };
        dbuf_bf da(a, 1), db(bm, 1), dc(c, 0), dd(vec(128, 0.0f), 0);
        TRN_CUDA_LAUNCH(k_frag, dim3(1), dim3(32), 16 * 24 * 2 + 256 * 2, trn__cu.stream, dd.f(),
                        (const trn__bf16 *)da.p, (const trn__bf16 *)db.p, dc.f(), how);
        vec d = dd.get();
        double w = 0, wrong = 0;
        for (int r = 0; r < 16; r++)
            for (int n = 0; n < 8; n++) {
                double s = c[(size_t)r * 8 + n], abs_s = fabs(s), s2 = s;
                for (int k = 0; k < 16; k++) {
                    s += (double)a[(size_t)r * 24 + k] * B(k, n);
                    abs_s += fabs(a[(size_t)r * 24 + k] * B(k, n));
                    s2 += (double)a[(size_t)r * 24 + (k ^ 1)] * B(k, n); /* a layout off by one column */
                }
                double tol = abs_s * ldexp(1.0, -19) + 1e-30;
                double e = fabs(d[(size_t)r * 8 + n] - s) / tol, e2 = fabs(d[(size_t)r * 8 + n] - s2) / tol;
                if (!(e <= w)) w = e;
                if (e2 > wrong) wrong = e2;
            }
        CHECK(w <= 1.0, "mma.m16n8k16 via ldmatrix form %d: error %.3g of the tolerance\n", how, w);
        CHECK(wrong > 1.0, "mma.m16n8k16 form %d: also matches a product with swapped columns\n", how);
        CHECK(harness_errors() == e0, "fragments form %d: the harness reported %ld errors\n", how, harness_errors() - e0);
        printf("fragments: ldmatrix form %d + mma.m16n8k16: %.3f of tol\n", how, w);
    }
}

/* ------------------------------------------------------- 2. cp.async */
/* how: 0 copy rows (row 3 zero-filled), wait, read; 1 read before the
   wait (sees NaN, the fresh shared memory); 2 misaligned cp.async; 3 a
   copy never waited for; 4 a misaligned ldmatrix row */
static __global__ void k_cp(float *out, const trn__bf16 *src, int how) {
    TRN__CUDA_SHARED_128(trn__bf16, sm);
    int lane = threadIdx.x;
    if (lane < 8) trn__cp_async16(sm + lane * 8 + (how == 2 && lane == 1 ? 4 : 0), src + lane * 8, lane == 3 ? 0 : 16);
    trn__cp_async_commit();
    if (how == 1) out[lane] = __bfloat162float(sm[lane * 2]);
    if (how != 3) trn__cp_async_wait<0>();
    __syncwarp();
    if (how == 0) out[lane] = __bfloat162float(sm[lane * 2]);
    if (how == 4) {
        unsigned r[4];
        trn__ldmatrix_x4(r, sm + (lane == 7 ? 4 : 0));
    }
}
static void test_cp_async(void) {
    vec src(64);
    for (int i = 0; i < 64; i++) src[i] = (float)(i + 1);
    dbuf_bf ds(src, 1), dout(vec(32, 0.0f), 0);
    long e0 = harness_errors();
    TRN_CUDA_LAUNCH(k_cp, dim3(1), dim3(32), 128 + 64, trn__cu.stream, dout.f(), (const trn__bf16 *)ds.p, 0);
    vec o = dout.get();
    int bad = 0;
    for (int i = 0; i < 32; i++) bad += o[i] != (i * 2 / 8 == 3 ? 0.0f : (float)(i * 2 + 1));
    CHECK(bad == 0 && harness_errors() == e0, "cp.async copy with zero-fill: %d wrong values, %ld harness errors\n",
          bad, harness_errors() - e0);
#ifdef TRN_CUDA_ON_CPU
    TRN_CUDA_LAUNCH(k_cp, dim3(1), dim3(32), 128 + 64, trn__cu.stream, dout.f(), (const trn__bf16 *)ds.p, 1);
    o = dout.get();
    CHECK(o[0] != o[0], "a read before cp.async.wait_group saw %g, not the old contents (NaN)\n", o[0]);
    const char *what[] = {"", "", "a misaligned cp.async", "a copy never waited for", "a misaligned ldmatrix row"};
    for (int how = 2; how <= 4; how++) {
        e0 = harness_errors();
        fprintf(stderr, "(expected: the harness reports %s)\n", what[how]);
        TRN_CUDA_LAUNCH(k_cp, dim3(1), dim3(32), 128 + 64, trn__cu.stream, dout.f(), (const trn__bf16 *)ds.p, how);
        CHECK(harness_errors() > e0, "not reported: %s\n", what[how]);
    }
#endif
}

/* ----------------------------------------- 3. FA2 against the reference */
static void test_fa2(int B, int T, int NH, int NKV, int hs, int causal, const char *mode) {
    long e0 = harness_errors();
    int ld = (NH + 2 * NKV) * hs, C = NH * hs, G = NH / NKV;
    size_t nq = (size_t)B * T * ld, no = (size_t)B * T * C, nl = (size_t)B * NH * T, na = nl * T;
    double scale = 1.0 / sqrt((double)hs);
    char shape[80];
    snprintf(shape, sizeof shape, "B=%d T=%d NH=%d NKV=%d hs=%d %s %s", B, T, NH, NKV, hs, causal ? "causal" : "full",
             mode);
    /* the reference: materialized, fp32, on the CPU */
    vec qkv = randn_bf(nq), out_c(no), att(na), out_w(no), att_w(na);
    trn_attention_forward(out_c.data(), att.data(), qkv.data(), B, T, NH, NKV, hs, causal);
    trn_attention_forward(out_w.data(), att_w.data(), qkv.data(), B, T, NH, NKV, hs, !causal); /* wrong */
    dbuf_bf dq(qkv, 1), dout(vec(no, 0.0f), 1), dlse(vec(nl, 0.0f), 0);
    GPU->flash_attention_forward(dout.f(), dlse.f(), dq.f(), B, T, NH, NKV, hs, causal);
    vec out_g = dout.get(), lse_g = dlse.get();
    std::vector<double> tol_o(no), tol_l(nl), L(nl);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < T; i++) {
                const float *q = &qkv[((size_t)b * T + i) * ld + (size_t)h * hs];
                std::vector<double> sv((size_t)T, -INFINITY), acc((size_t)hs, 0.0);
                double mx = -INFINITY, l = 0;
                for (int j = 0; j <= (causal ? i : T - 1); j++) {
                    const float *k = &qkv[((size_t)b * T + j) * ld + (size_t)(NH + h / G) * hs];
                    double s = 0;
                    for (int d = 0; d < hs; d++) s += (double)q[d] * k[d];
                    sv[(size_t)j] = scale * s;
                    mx = fmax(mx, scale * s);
                }
                for (int j = 0; j < T; j++) l += sv[(size_t)j] == -INFINITY ? 0 : exp(sv[(size_t)j] - mx);
                double Lr = mx + log(l);
                L[((size_t)b * NH + h) * T + i] = Lr;
                for (int j = 0; j <= (causal ? i : T - 1); j++) {
                    const float *v = &qkv[((size_t)b * T + j) * ld + (size_t)(NH + NKV + h / G) * hs];
                    double p = exp(sv[(size_t)j] - Lr);
                    for (int d = 0; d < hs; d++) acc[(size_t)d] += p * fabs(v[d]);
                }
                size_t o = ((size_t)b * T + i) * C + (size_t)h * hs;
                for (int d = 0; d < hs; d++)
                    tol_o[o + (size_t)d] =
                        U * ((1 + U) * acc[(size_t)d] + fabs(out_c[o + (size_t)d])) + 3e-5 * (acc[(size_t)d] + 1);
                tol_l[((size_t)b * NH + h) * T + i] = 1e-5 + 1e-6 * fabs(Lr);
            }
    vec lse_c(nl);
    for (size_t n = 0; n < nl; n++) lse_c[n] = (float)L[n];
    double wo = worst(out_g, out_c, tol_o), wl = worst(lse_g, lse_c, tol_l);
    CHECK(wo <= 1 && wl <= 1, "fa2 forward %s: error %.3g (out), %.3g (lse) of the tolerance\n", shape, wo, wl);
    if (T > 1) CHECK(worst(out_g, out_w, tol_o) > 1, "fa2 forward %s: also passes against the other mask\n", shape);

    /* backward: the reference from its own att; the GPU from its own out
       and lse, into a dqkv that holds values already (backward accumulates) */
    vec g = randn_bf(no), dqkv0 = randn_bf(nq), dqkv_c = dqkv0, scratch(na);
    trn_attention_backward(dqkv_c.data(), scratch.data(), g.data(), qkv.data(), att.data(), B, T, NH, NKV, hs, causal);
    dbuf_bf dg(g, 1), ddq(dqkv0, 1);
    GPU->flash_attention_backward(ddq.f(), dg.f(), dq.f(), dout.f(), dlse.f(), B, T, NH, NKV, hs, causal);
    vec dqkv_g = ddq.get();
    std::vector<double> acc(nq, 0.0), moved(nq, 0.0), tol_d(nq); /* moved: what the error in D moves */
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < T; i++) {
                size_t rq = ((size_t)b * T + i) * ld, ro = ((size_t)b * T + i) * C + (size_t)h * hs;
                double Lr = L[((size_t)b * NH + h) * T + i], D = 0, dD = 0;
                for (int d = 0; d < hs; d++) {
                    D += (double)g[ro + (size_t)d] * out_c[ro + (size_t)d];
                    dD += fabs(g[ro + (size_t)d]) * tol_o[ro + (size_t)d];
                }
                for (int j = 0; j <= (causal ? i : T - 1); j++) {
                    size_t rk = ((size_t)b * T + j) * ld + (size_t)(NH + h / G) * hs, rv = rk + (size_t)NKV * hs;
                    double s = 0, dp = 0;
                    for (int d = 0; d < hs; d++) {
                        s += (double)qkv[rq + (size_t)h * hs + (size_t)d] * qkv[rk + (size_t)d];
                        dp += (double)g[ro + (size_t)d] * qkv[rv + (size_t)d];
                    }
                    double p = exp(scale * s - Lr), ds = fabs(p * (dp - D)) + p * dD;
                    for (int d = 0; d < hs; d++) {
                        acc[rq + (size_t)h * hs + (size_t)d] += scale * ds * fabs(qkv[rk + (size_t)d]);
                        acc[rk + (size_t)d] += scale * ds * fabs(qkv[rq + (size_t)h * hs + (size_t)d]);
                        moved[rq + (size_t)h * hs + (size_t)d] += scale * p * dD * fabs(qkv[rk + (size_t)d]);
                        moved[rk + (size_t)d] += scale * p * dD * fabs(qkv[rq + (size_t)h * hs + (size_t)d]);
                        acc[rv + (size_t)d] += p * fabs(g[ro + (size_t)d]);
                    }
                }
            }
    vec overwritten(nq);
    for (size_t n = 0; n < nq; n++) {
        tol_d[n] = U * ((1 + U) * acc[n] + fabs(dqkv_c[n])) + moved[n] + 3e-5 * (acc[n] + 1);
        overwritten[n] = dqkv_c[n] - dqkv0[n];
    }
    double wd = worst(dqkv_g, dqkv_c, tol_d);
    size_t at = worst_at;
    CHECK(wd <= 1, "fa2 backward %s: error %.3g of the tolerance at (b %zu, t %zu, column %zu: %s): %g, want %g +- %g\n",
          shape, wd, at / ld / T, at / ld % T, at % ld, at % ld < (size_t)C ? "dQ" : at % ld < (size_t)C + NKV * hs ? "dK" : "dV",
          dqkv_g[at], dqkv_c[at], tol_d[at]);
    CHECK(worst(dqkv_g, overwritten, tol_d) > 1, "fa2 backward %s: also passes as if it overwrote dqkv\n", shape);
    /* a fresh gradient (flash_attention_backward_ex, write = 1): dqkv's old
       contents are NaN and must never be read; the result is the gradient
       alone (the overwritten reference), every element stored: the same
       bound, its last rounding that of the gradient alone */
    {
        std::vector<double> tol_w(nq);
        for (size_t n = 0; n < nq; n++)
            tol_w[n] = U * ((1 + U) * acc[n] + fabs(overwritten[n])) + moved[n] + 3e-5 * (acc[n] + 1);
        vec nan_q(nq, NAN);
        dbuf_bf ddw(nan_q, 1);
        CHECK(GPU->flash_attention_backward_ex != NULL, "no flash_attention_backward_ex in bf16\n");
        if (GPU->flash_attention_backward_ex) {
            GPU->flash_attention_backward_ex(ddw.f(), dg.f(), dq.f(), dout.f(), dlse.f(), B, T, NH, NKV, hs, causal, 1);
            vec wr = ddw.get();
            double ww = worst(wr, overwritten, tol_w);
            CHECK(ww <= 1, "fa2 backward %s, written: error %.3g of the tolerance at element %zu: %g, want %g\n", shape,
                  ww, worst_at, wr[worst_at], overwritten[worst_at]);
        }
    }
    /* deterministic: a second backward gives the same bits */
    if (!trn__fa2_cfg.dq_atomic) {
        dbuf_bf ddq2(dqkv0, 1);
        GPU->flash_attention_backward(ddq2.f(), dg.f(), dq.f(), dout.f(), dlse.f(), B, T, NH, NKV, hs, causal);
        vec again = ddq2.get();
        CHECK(!memcmp(again.data(), dqkv_g.data(), nq * sizeof(float)), "fa2 backward %s: two runs differ\n", shape);
    }
    /* max |error| in absolute terms, for the report */
    double ao = 0, ad = 0;
    for (size_t n = 0; n < no; n++) ao = fmax(ao, fabs(out_g[n] - out_c[n]));
    for (size_t n = 0; n < nq; n++) ad = fmax(ad, fabs(dqkv_g[n] - dqkv_c[n]));
    printf("fa2 %-52s fwd %.3f of tol (max |err| %.2e), lse %.3f; bwd %.3f of tol (max |err| %.2e)\n", shape, wo, ao,
           wl, wd, ad);
    CHECK(harness_errors() == e0, "fa2 %s: the harness reported %ld errors\n", shape, harness_errors() - e0);
}

int main(int argc, char **argv) {
    uint64_t seed = 1;
    int quick = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--seed") && i + 1 < argc) seed = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--quick")) quick = 1;
        else { fprintf(stderr, "usage: %s [--seed N] [--quick]\n", argv[0]); return 2; }
    }
    trn_rng_seed(&RNG, seed);
    trn_set_threads(1);
    if (trn_cuda_init(0) != TRN_OK) {
        printf("no CUDA device (%s): nothing to test\n", trn_error_reason());
        return check_summary();
    }
    CHECK(trn_cuda_set_precision(TRN_CUDA_BF16) == TRN_OK, "trn_cuda_set_precision(bf16): %s\n", trn_error_reason());
    GPU = trn_cuda_backend();
    CHECK(trn_cuda_set_flash((trn_cuda_flash)7, 0) == TRN_ERR_INVALID, "trn_cuda_set_flash(7) accepted\n");
    test_fragments();
    test_cp_async();

    const char *fa2 = "fa2";
    /* head sizes 64 and 128: every T, both masks, MHA and GQA */
    for (int hs : {64, 128})
        for (int T : {1, 17, 64, 100, 129})
            for (int causal = 0; causal < 2; causal++)
                for (int nkv : {4, 1}) {
                    if (quick && T != 100) continue;
                    test_fa2(T == 17 ? 2 : 1, T, 4, nkv, hs, causal, fa2);
                }
    /* the other head sizes FA2 takes, and 24 (the fp32-FMA kernels) */
    for (int hs : {16, 32, 48, 80, 96, 112, 24})
        for (int causal = 0; causal < 2; causal++) test_fa2(2, 33, 4, causal ? 2 : 4, hs, causal, hs % 16 ? "fma" : fa2);
    /* dQ with atomics; the WMMA kernels (old vs new) */
    trn_cuda_set_flash(TRN_CUDA_FLASH_FA2, 1);
    for (int causal = 0; causal < 2; causal++) test_fa2(2, 100, 4, 2, 64, causal, "fa2 dq-atomic");
    trn_cuda_set_flash(TRN_CUDA_FLASH_WMMA, 0);
    for (int causal = 0; causal < 2; causal++) test_fa2(2, 100, 4, 2, 64, causal, "wmma");
    trn_cuda_set_flash(TRN_CUDA_FLASH_FA2, 0);
    trn_cuda_shutdown();
    return check_summary();
}
