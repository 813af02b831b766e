// build: -O1 -g1 -Wno-maybe-uninitialized
// requires: test -f examples/gpt2.c
/* tests/test_cuda_add_layernorm.cpp - train_cuda.h's residual add fused
   into the layernorm after it (>>addln), run on the CPU by
   tests/cuda_on_cpu.h, against the unfused kernels it replaces.

   1. Kernels, fp32 and bf16 tables: add_layernorm_forward (sum = a + b,
      out = layernorm(sum)) against add_forward then layernorm_forward, and
      layernorm_backward_ex (dinp +=, dinp2 written with the result)
      against layernorm_backward then a copy. The fused kernels do the
      unfused ones' math in the same order (the sum rounded to the
      activation dtype before it is normalized, every sum in lane order),
      so every output must be EQUAL bit for bit, in bf16 as in fp32. Shapes:
      C = 768 (GPT-2: 16-byte packs, 3 a lane), 53 and 777 (not multiples
      of 8: the scalar path), 768 with pointers one element off a 16-byte
      boundary (the scalar path at a packable C), sum over b (in place, as
      GPT-2 runs it) and into its own buffer.
   2. examples/gpt2.c's model, 2 steps on the CUDA table and on a copy of it
      with the two >>addln entries removed (train.h then runs the unfused
      ops): losses, every gradient and the weights after AdamW equal bit
      for bit, fp32 and bf16; and the fused model with --recompute (each
      block recorded again inside backward) equal to it without.
   A check that cannot fail is not a check: each kernel comparison is also
   made against the same unfused run started from other gradients (or
   with the add left out), which must differ. The whole test failed as it
   should with a planted bug (bf16 sum not rounded before the statistics;
   dinp2 left unwritten in the scalar path).
   tests/test_cuda_add_layernorm_gpu.cu is the same file for a real GPU.
   Run:  tests/bin/test_cuda_add_layernorm [seed] */
#ifndef __CUDACC__
#define TRN_CUDA_FLASH_HS(X) X(16) /* bf16 attention compiled for the tiny preset's head size only (train_cuda.h) */
#include "tests/cuda_on_cpu.h"
#endif
#define TRN_USE_CUDA
#define TRAIN_CUDA_IMPLEMENTATION
#define GPT2_NO_MAIN
#include "examples/gpt2.c"
#include "tests/check.h"

#include <vector>

typedef std::vector<float> vec;
static trn_backend F32T, BF16T;
static trn_rng RNG;

static float rn(float x) { return __bfloat162float(__float2bfloat16(x)); }
static vec randbf(size_t n, float scale = 1.0f) {
    vec v(n);
    for (size_t i = 0; i < n; i++) v[i] = rn(scale * trn_rng_normal(&RNG));
    return v;
}
/* device memory holding v as fp32 or bf16, `off` elements into an
   allocation (off = 1: not 16-byte aligned) */
struct dv {
    char *base = nullptr;
    size_t n = 0;
    int bf = 0, off = 0;
    dv(const vec &v, int bf_, int off_ = 0) : n(v.size()), bf(bf_), off(off_) {
        base = (char *)F32T.alloc((n + 8) * 4, TRN_KIND_ACTIVATIONS);
        if (!base) trn_fatal("test: %s", trn_error_reason());
        set(v);
    }
    dv(const dv &) = delete;
    ~dv() { F32T.free(base); }
    float *f() { return (float *)(base + (size_t)off * (bf ? 2 : 4)); }
    void set(const vec &v) {
        if (bf) {
            std::vector<__nv_bfloat16> h(n);
            for (size_t i = 0; i < n; i++) h[i] = __float2bfloat16(v[i]);
            F32T.upload(f(), h.data(), n * 2);
        } else F32T.upload(f(), v.data(), n * 4);
    }
    vec get() {
        vec v(n);
        if (bf) {
            std::vector<__nv_bfloat16> h(n);
            F32T.download(h.data(), f(), n * 2);
            for (size_t i = 0; i < n; i++) v[i] = __bfloat162float(h[i]);
        } else F32T.download(v.data(), f(), n * 4);
        return v;
    }
};
static vec zeros(size_t n) { return vec(n, 0.0f); }
static int same(const vec &a, const vec &b) { return a.size() == b.size() && memcmp(a.data(), b.data(), 4 * a.size()) == 0; }
static size_t n_diff(const vec &a, const vec &b) {
    size_t k = 0;
    for (size_t i = 0; i < a.size() && i < b.size(); i++) k += memcmp(&a[i], &b[i], 4) != 0;
    return k + (a.size() > b.size() ? a.size() - b.size() : b.size() - a.size());
}

/* one shape, one precision: the fused pair against the unfused ops */
static void test_kernels(int bf, int N, int C, int off, int in_place) {
    const trn_backend *T = bf ? &BF16T : &F32T;
    const char *pr = bf ? "bf16" : "fp32";
    size_t n = (size_t)N * C;
    vec a = randbf(n, 2.0f), b = randbf(n), w = randbf(C), bias = randbf(C), g = randbf(n), d0 = randbf(n);
    long e0 = harness_errors();
    /* forward, unfused: s = a + b, then the layernorm of s */
    dv ua(a, bf, off), ub(b, bf, off), us(zeros(n), bf, off), uo(zeros(n), bf, off), uw(w, bf), ubi(bias, bf);
    dv um(zeros(N), 0), ur(zeros(N), 0);
    T->add_forward(us.f(), ua.f(), ub.f(), n);
    T->layernorm_forward(uo.f(), um.f(), ur.f(), us.f(), uw.f(), ubi.f(), N, C);
    /* fused: the sum over b (GPT-2's way) or into its own buffer */
    dv fa(a, bf, off), fb(b, bf, off), fs(zeros(n), bf, off), fo(zeros(n), bf, off), fm(zeros(N), 0), fr(zeros(N), 0);
    float *sum = in_place ? fb.f() : fs.f();
    T->add_layernorm_forward(sum, fo.f(), fm.f(), fr.f(), fa.f(), fb.f(), uw.f(), ubi.f(), N, C);
    vec s_ref = us.get(), s_got = in_place ? fb.get() : fs.get();
    int ok_f = same(s_got, s_ref) && same(fo.get(), uo.get()) && same(fm.get(), um.get()) && same(fr.get(), ur.get());
    printf("%s add+layernorm fwd N=%d C=%d%s%s: sum, out, mean, rstd %s\n", pr, N, C, off ? " (unaligned)" : "",
           in_place ? " (sum over b)" : "", ok_f ? "bit-identical" : "DIFFER");
    CHECK(ok_f, "%s add+layernorm fwd N=%d C=%d: differs from add + layernorm (%zu of sum, %zu of out)\n", pr, N, C,
          n_diff(s_got, s_ref), n_diff(fo.get(), uo.get()));
    /* the check can fail: the layernorm of a alone differs */
    T->layernorm_forward(uo.f(), um.f(), ur.f(), ua.f(), uw.f(), ubi.f(), N, C);
    CHECK(!same(fo.get(), uo.get()), "%s: the layernorm without the add gives the same out: the check is blind\n", pr);

    /* backward from dinp = d0 (the residual's gradient so far), dw, db from dw0, db0 */
    vec dw0 = randbf(C), db0 = randbf(C);
    dv gout(g, bf, off), ux(d0, bf, off), uw2(dw0, 0), ub2(db0, 0), ucopy(zeros(n), bf, off);
    T->layernorm_backward(ux.f(), uw2.f(), ub2.f(), gout.f(), us.f(), uw.f(), fm.f(), fr.f(), N, C);
    T->copy(ucopy.f(), ux.f(), n * (bf ? 2 : 4));
    dv fx(d0, bf, off), fw2(dw0, 0), fb2(db0, 0), f2(randbf(n), bf, off); /* dinp2 starts as garbage: it is written */
    T->layernorm_backward_ex(fx.f(), f2.f(), fw2.f(), fb2.f(), gout.f(), us.f(), uw.f(), fm.f(), fr.f(), N, C, 0);
    vec dx = fx.get();
    int ok_b = same(dx, ux.get()) && same(f2.get(), ucopy.get()) && same(fw2.get(), uw2.get()) && same(fb2.get(), ub2.get());
    printf("%s layernorm bwd_ex N=%d C=%d%s: dinp, dinp2, dw, db %s\n", pr, N, C, off ? " (unaligned)" : "",
           ok_b ? "bit-identical to layernorm bwd + copy" : "DIFFER");
    CHECK(ok_b, "%s layernorm bwd_ex N=%d C=%d: differs (dinp %zu, dinp2 %zu, dw %zu, db %zu)\n", pr, N, C,
          n_diff(dx, ux.get()), n_diff(f2.get(), ucopy.get()), n_diff(fw2.get(), uw2.get()), n_diff(fb2.get(), ub2.get()));
    /* the check can fail: started from zero (an overwrite of dinp) it differs */
    dv zx(zeros(n), bf, off);
    T->layernorm_backward(zx.f(), NULL, NULL, gout.f(), us.f(), uw.f(), fm.f(), fr.f(), N, C);
    CHECK(!same(dx, zx.get()), "%s: dinp from zero equals dinp from d0: the check is blind\n", pr);
    /* dinp2 NULL: just layernorm_backward */
    dv nx(d0, bf, off);
    T->layernorm_backward_ex(nx.f(), NULL, NULL, NULL, gout.f(), us.f(), uw.f(), fm.f(), fr.f(), N, C, 0);
    CHECK(same(nx.get(), dx), "%s layernorm bwd_ex with dinp2 NULL differs\n", pr);
    /* write_dinp: a fresh dinp (NaN: any read of it shows) is WRITTEN, bit for
       bit what adding to zeros gives (zx above) */
    dv wx(vec(n, NAN), bf, off);
    T->layernorm_backward_ex(wx.f(), NULL, NULL, NULL, gout.f(), us.f(), uw.f(), fm.f(), fr.f(), N, C, 1);
    CHECK(same(wx.get(), zx.get()), "%s layernorm bwd_ex N=%d C=%d, dinp written: differs from dinp from zero (%zu)\n",
          pr, N, C, n_diff(wx.get(), zx.get()));
    CHECK(harness_errors() == e0, "%s N=%d C=%d: the harness reported errors\n", pr, N, C);
}

/* ---- examples/gpt2.c's model: fused table against the unfused one ------- */
struct run_out { std::vector<float> loss, grads, weights; };
static run_out gpt2_run(const trn_backend *be, int B, int T, int recompute) {
    const gpt2_config cfg = find_preset("tiny")->cfg;
    run_out o;
    gpt2 g;
    if (gpt2_create(&g, &cfg, be) != TRN_OK) trn_fatal("gpt2_create: %s", trn_error_reason());
    gpt2_init_weights(&g, 7);
    g.recompute = recompute;
    trn_adamw_desc d;
    memset(&d, 0, sizeof d);
    d.lr = 1e-3f;
    trn_adamw opt;
    trn_adamw_init(&opt, &d);
    std::vector<int> x((size_t)B * T), y((size_t)B * T);
    for (int i = 0; i < B * T; i++) { x[(size_t)i] = (i * 31 + 5) % cfg.vocab_size; y[(size_t)i] = (i * 17 + 3) % cfg.vocab_size; }
    size_t n = g.m.n_floats;
    for (int s = 0; s < 2; s++) {
        trn_zero_grad(&g.m);
        trn_reset(&g.m);
        trn_tensor *l = gpt2_loss(&g, x.data(), y.data(), B, T);
        o.loss.push_back(trn_item(&g.m, l));
        trn_backward(&g.m, l);
        if (s == 1) { o.grads.resize(n); be->download(o.grads.data(), g.m.grad_data, n * 4); }
        if (trn_adamw_step(&opt, &g.m, 1e-3f) != TRN_OK) trn_fatal("adamw: %s", trn_error_reason());
    }
    o.weights.resize(n);
    be->download(o.weights.data(), g.m.param_data, n * 4);
    trn_adamw_free(&opt);
    gpt2_free(&g);
    return o;
}
static void test_gpt2(trn_cuda_precision p, const char *pr) {
    CHECK(trn_cuda_set_precision(p) == TRN_OK, "precision: %s\n", trn_error_reason());
    trn_backend unfused = *trn_cuda_backend();
    unfused.add_layernorm_forward = NULL;
    unfused.layernorm_backward_ex = NULL;
    trn_cuda_sites_start(0);
    run_out f = gpt2_run(trn_cuda_backend(), 2, 13, 0);
    const trn_cuda_site_row *rows;
    int nr = trn_cuda_sites_read(&rows), fused_calls = 0;
    for (int i = 0; i < nr; i++) if (!strcmp(rows[i].name, "add+layernorm fwd")) fused_calls += (int)rows[i].calls;
    run_out u = gpt2_run(&unfused, 2, 13, 0);
    run_out r = gpt2_run(trn_cuda_backend(), 2, 13, 1); /* --recompute: the blocks run again inside backward */
    const gpt2_config cfg = find_preset("tiny")->cfg;
    printf("gpt2 'tiny' %s, 2 steps: losses %.6f %.6f; fused %d add+layernorm launches (want 2 x %d layers); losses %s, "
           "grads %zu differ, weights %zu differ\n", pr, f.loss[0], f.loss[1], fused_calls, cfg.n_layer,
           same(f.loss, u.loss) ? "equal" : "DIFFER", n_diff(f.grads, u.grads), n_diff(f.weights, u.weights));
    CHECK(fused_calls == 2 * cfg.n_layer, "%s: %d fused launches, want %d: the model does not take the fused op\n", pr,
          fused_calls, 2 * cfg.n_layer);
    CHECK(same(f.loss, u.loss) && same(f.grads, u.grads) && same(f.weights, u.weights),
          "%s: the fused model differs from the unfused one\n", pr);
    printf("gpt2 'tiny' %s, fused with --recompute: grads %zu differ, weights %zu differ\n", pr, n_diff(r.grads, f.grads),
           n_diff(r.weights, f.weights));
    CHECK(same(r.loss, f.loss) && same(r.grads, f.grads) && same(r.weights, f.weights),
          "%s: the fused model with --recompute differs from the one without\n", pr);
}

int main(int argc, char **argv) {
    trn_rng_seed(&RNG, argc > 1 ? strtoull(argv[1], NULL, 10) : 1);
    trn_set_threads(1);
    if (trn_cuda_init(0) != TRN_OK) {
        printf("no CUDA device (%s): nothing to test\n", trn_error_reason());
        return check_summary();
    }
    trn_cuda_set_tf32(0);
    CHECK(trn_cuda_set_precision(TRN_CUDA_FP32) == TRN_OK, "set fp32: %s\n", trn_error_reason());
    F32T = *trn_cuda_backend();
    CHECK(trn_cuda_set_precision(TRN_CUDA_BF16) == TRN_OK, "set bf16: %s\n", trn_error_reason());
    BF16T = *trn_cuda_backend();
    CHECK(F32T.add_layernorm_forward && F32T.layernorm_backward_ex && BF16T.add_layernorm_forward &&
          BF16T.layernorm_backward_ex, "the CUDA tables lack the >>addln entries\n");
    CHECK(trn_cpu_backend()->add_layernorm_forward == NULL, "the CPU table has add_layernorm_forward: then the "
          "CPU's GPT-2 would no longer run the ops it ran before\n");
    for (int bf = 0; bf < 2; bf++) {
        test_kernels(bf, 37, 768, 0, 1); /* GPT-2's C: 16-byte packs, in place */
        test_kernels(bf, 37, 768, 0, 0);
        test_kernels(bf, 37, 768, 1, 1); /* unaligned: the scalar path */
        test_kernels(bf, 37, 53, 0, 1);  /* C not a multiple of 8 */
        test_kernels(bf, 5, 777, 0, 0);  /* 24 or 25 elements a lane */
        test_kernels(bf, 200, 264, 0, 0); /* the one-launch backward over 4 blocks, 2 packs a lane */
    }
    test_gpt2(TRN_CUDA_FP32, "fp32");
    test_gpt2(TRN_CUDA_BF16, "bf16");
    trn_cuda_shutdown();
    return check_summary();
}
