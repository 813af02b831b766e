// build: -O1 -g1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined -Wno-maybe-uninitialized
/* tests/test_cuda_bf16_ops.cpp - the bf16 instantiations of train_cuda.h's
   activation kernels (everything but the GEMMs, attention and the
   optimizer) against their fp32 instantiations, run on the CPU by
   tests/cuda_on_cpu.h, and the harness's bf16 conversions against an
   independent reference.

   How a kernel is checked: its inputs are drawn and rounded to bf16 once;
   the fp32 table (trn_cuda_set_precision(TRN_CUDA_FP32)) runs it on those
   values stored as floats, the bf16 table on the same values stored as
   bf16. Both compute in fp32 from identical loaded values, so the only
   difference is the bf16 kernel's rounding of what it stores: ONE round to
   nearest even per output element. Hence the tolerances:
     'a'  an A output (activation, activation gradient):
          |bf16 - fp32| <= 2^-8 |fp32|  (bf16 keeps 8 significant bits;
          its unit roundoff is 2^-8 = 0.39%). A backward's += is one
          rounding too: the bf16 kernel stores rn(d0 + g), the fp32 one
          d0 + g, from the same bf16 value d0.
     'x'  exactly equal: copies of bf16 values (embedding, transpose, slice,
          concat forward) and fp32 outputs computed from the same values
          (mean, rstd, dw and db of the norms: fp32 partials summed in
          the same order).
     'f'  fp32 sums in another order: embedding's dtable (atomics, whose
          order the harness shuffles), cross-entropy's lse and losses
          (a thread's columns come in 16-byte packs: 4 fp32, 8 bf16):
          |d| <= 1e-5 (1 + |ref|): a few ulps of dtable's sums of <= 10
          terms of O(1), and of a log-sum-exp of O(10).
   A check that cannot fail is not a check: a forward's A outputs truncated
   to bf16 (instead of rounded) must exceed the tolerance, and a
   backward's gradients must be far from the fp32 result of the same
   backward started from zero gradients (what an overwrite instead of +=
   would store). tests/cuda_mutations.py breaks the kernels (a truncating
   store, a layernorm that sums in bf16, a db that overwrites) and sees this
   test fail.

   Shapes are odd on purpose (37 rows, 53 or 777 channels, 1037 elements):
   nothing is a multiple of a warp or a block. tests/test_cuda_bf16_ops_gpu.cu
   is the same file for a real GPU.
   Run:  tests/bin/test_cuda_bf16_ops [seed] */
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
#include <vector>

typedef std::vector<float> vec;
typedef std::vector<vec> outs;
static trn_backend F32T, BF16T;                   /* the table in each precision */
static const trn_backend *F = &F32T, *H = &BF16T; /* F: fp32, H: bf16 */
static trn_rng RNG;

/* ---- conversions: the harness against a reference in double ------------- */
static uint32_t bits_of(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float float_of(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
/* the value of bf16 bits h, from its fields (bf16 pattern 0x7f80 + 1 step:
   2^128, the next value past the largest finite one, where rounding to
   infinity starts as if the exponent range went on) */
static double bf16_value(uint32_t h) {
    int sign = (h >> 15) & 1, e = (h >> 7) & 0xff, m = h & 0x7f;
    double v = e == 0 ? ldexp((double)m, -133) : ldexp((double)(128 + m), e - 134);
    return sign ? -v : v;
}
/* round-to-nearest-even of a float to bf16, chosen between the two
   neighbours by distances in double (exact: both neighbours and f are
   doubles, and their differences have at most 25 significant bits) */
static uint32_t ref_f2bf(float f) {
    uint32_t u = bits_of(f), lo = u >> 16, hi = lo + 1;
    if (f != f) return 0xffffffffu; /* NaN: any NaN is right (checked apart) */
    if ((u & 0x7fffffffu) == 0x7f800000u) return lo; /* +-inf */
    double x = fabs((double)f), a = fabs(bf16_value(lo)), b = fabs(bf16_value(hi));
    if (x - a < b - x) return lo;
    if (x - a > b - x) return hi;
    return (lo & 1) ? hi : lo; /* a tie: the even one */
}
/* the bits of a bf16 through memcpy (cuda_bf16.h keeps its member private) */
static uint32_t harness_f2bf(float f) {
    __nv_bfloat16 b = __float2bfloat16(f);
    uint16_t h;
    memcpy(&h, &b, 2);
    return h;
}
static int is_bf16_nan(uint32_t h) { return (h & 0x7f80u) == 0x7f80u && (h & 0x7fu) != 0; }

static void test_conversions(void) {
    /* bf16 -> float: every one of the 65536 patterns is exact, and float ->
       bf16 gives the pattern back (NaN stays a NaN) */
    long bad_up = 0, bad_back = 0;
    for (uint32_t h = 0; h < 0x10000u; h++) {
        __nv_bfloat16 b;
        uint16_t h16 = (uint16_t)h;
        memcpy(&b, &h16, 2);
        float f = __bfloat162float(b);
        if (is_bf16_nan(h)) {
            bad_up += f == f;
            bad_back += !is_bf16_nan(harness_f2bf(f));
        } else {
            bad_up += (double)f != bf16_value(h) && !((h & 0x7fffu) == 0x7f80u && isinf(f));
            bad_back += harness_f2bf(f) != h;
        }
    }
    CHECK(bad_up == 0, "bf16 -> float: %ld of 65536 patterns wrong\n", bad_up);
    CHECK(bad_back == 0, "float -> bf16 -> float: %ld of 65536 patterns do not come back\n", bad_back);

    /* the cases that decide a rounding, named */
    struct { uint32_t in, out; const char *what; } cases[] = {
        {0x3f808000u, 0x3f80u, "tie, even below: down"},
        {0x3f818000u, 0x3f82u, "tie, odd below: up"},
        {0x3f808001u, 0x3f81u, "just above a tie: up"},
        {0x3f807fffu, 0x3f80u, "just below a tie: down"},
        {0xbf818000u, 0xbf82u, "negative tie, odd below: away from zero"},
        {0x7f7f7fffu, 0x7f7fu, "below the overflow midpoint: largest finite"},
        {0x7f7f8000u, 0x7f80u, "the overflow midpoint (odd below): infinity"},
        {0x7f7fffffu, 0x7f80u, "FLT_MAX: infinity"},
        {0xff7fffffu, 0xff80u, "-FLT_MAX: -infinity"},
        {0x7f800000u, 0x7f80u, "infinity"},
        {0x80000000u, 0x8000u, "-0 keeps its sign"},
        {0x00000001u, 0x0000u, "smallest subnormal: 0"},
        {0x00008000u, 0x0000u, "subnormal tie, even below: 0"},
        {0x00018000u, 0x0002u, "subnormal tie, odd below: up"},
        {0x80018001u, 0x8002u, "negative subnormal above a tie"},
        {0x007fffffu, 0x0080u, "largest subnormal: rounds to the smallest normal"},
    };
    for (auto &c : cases) {
        uint32_t got = harness_f2bf(float_of(c.in)), ref = ref_f2bf(float_of(c.in));
        CHECK(got == c.out && ref == c.out, "float 0x%08x -> bf16: harness 0x%04x, reference 0x%04x, want 0x%04x (%s)\n",
              c.in, got, ref, c.out, c.what);
    }
    /* NaNs, quiet and signalling, of both signs: still NaN (a truncation
       of 0x7f800001 would make it infinity) */
    uint32_t nans[] = {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff800001u, 0x7fbfffffu, 0x7f80ffffu};
    long bad_nan = 0;
    for (uint32_t n : nans) bad_nan += !is_bf16_nan(harness_f2bf(float_of(n)));
    CHECK(bad_nan == 0, "%ld NaNs did not stay NaN\n", bad_nan);
    /* 2^20 random patterns plus every exact tie of a random pattern */
    long bad = 0;
    uint64_t s = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < (1 << 20); i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t u = (uint32_t)(s >> 32);
        if (i & 1) u = (u & 0xffff0000u) | 0x8000u; /* a tie */
        float f = float_of(u);
        uint32_t got = harness_f2bf(f), ref = ref_f2bf(f);
        bad += f != f ? !is_bf16_nan(got) : got != ref;
    }
    CHECK(bad == 0, "float -> bf16: %ld of 2^20 random floats (half of them ties) differ from the reference\n", bad);
    printf("%-40s %s\n", "conversions float <-> bf16", bad_up + bad_back + bad + bad_nan ? "WRONG" : "bit-exact");
}

/* ---- kernels ---------------------------------------------------------------- */
static float rn(float x) { return __bfloat162float(__float2bfloat16(x)); }
static float rz(float x) { return float_of(bits_of(x) & 0xffff0000u); } /* truncation: the wrong rounding */
/* n normal values times scale, rounded to bf16 (the inputs of both runs) */
static vec randbf(size_t n, float scale = 1.0f) {
    vec v(n);
    for (size_t i = 0; i < n; i++) v[i] = rn(scale * trn_rng_normal(&RNG));
    return v;
}
/* a device buffer: v stored as fp32 (bf = 0) or bf16 (bf = 1) */
struct dv {
    void *p = nullptr;
    size_t n = 0;
    int bf = 0;
    dv(const vec &v, int bf_) : n(v.size()), bf(bf_) {
        p = F->alloc(n ? n * 4 : 1, TRN_KIND_ACTIVATIONS);
        if (!p) trn_fatal("test: %s", trn_error_reason());
        if (bf) {
            std::vector<__nv_bfloat16> h(n);
            for (size_t i = 0; i < n; i++) h[i] = __float2bfloat16(v[i]);
            if (n) F->upload(p, h.data(), n * 2);
        } else if (n)
            F->upload(p, v.data(), n * 4);
    }
    dv(const dv &) = delete;
    ~dv() { F->free(p); }
    float *f() { return (float *)p; }
    vec get() {
        vec v(n);
        if (bf) {
            std::vector<__nv_bfloat16> h(n);
            if (n) F->download(h.data(), p, n * 2);
            for (size_t i = 0; i < n; i++) v[i] = __bfloat162float(h[i]);
        } else if (n)
            F->download(v.data(), p, n * 4);
        return v;
    }
};
static vec zeros(size_t n) { return vec(n, 0.0f); }

/* the largest |got - ref| over its bound (<= 1 passes), for kind 'a', 'x', 'f' */
static double excess(const vec &got, const vec &ref, char kind) {
    double worst = 0;
    if (got.size() != ref.size()) return INFINITY;
    for (size_t i = 0; i < ref.size(); i++) {
        double d = fabs((double)got[i] - (double)ref[i]), r = fabs((double)ref[i]);
        double bound = kind == 'a' ? ldexp(r, -8) : kind == 'f' ? 1e-5 * (1.0 + r) : 0.0;
        double e = d == 0 ? 0.0 : bound > 0 ? d / bound : INFINITY;
        if (!(e <= worst)) worst = e; /* NaN wins */
    }
    return worst;
}

/* runs op(be, bf, from_d0) in fp32 and in bf16; kinds[k] says how output k
   is compared (see the top). backward: the op accumulates into its
   outputs, which start from d0 (from_d0 = 1) or from zeros (from_d0 = 0). */
template <class Op> static void compare(const char *name, const char *kinds, int backward, Op op) {
    long e0 = harness_errors();
    outs ref = op(F, 0, 1), got = op(H, 1, 1);
    double worst = 0;
    CHECK(ref.size() == strlen(kinds) && got.size() == ref.size(), "%s: %zu outputs\n", name, ref.size());
    for (size_t k = 0; k < ref.size() && k < got.size(); k++) worst = fmax(worst, excess(got[k], ref[k], kinds[k]));
    printf("%-40s max|bf16-fp32|/bound %.3f  (%s)\n", name, worst, kinds);
    CHECK(worst <= 1.0, "%s: bf16 differs from fp32 by %.3g x the bound\n", name, worst);
    if (backward) { /* the += is there: an overwrite would give these */
        outs zero = op(F, 0, 0);
        double far = INFINITY;
        for (size_t k = 0; k < got.size() && k < zero.size(); k++)
            if (got[k].size()) far = fmin(far, excess(got[k], zero[k], kinds[k]));
        CHECK(far > 1.0, "%s: a gradient equals the one from a zero start (overwritten, not accumulated)\n", name);
    } else { /* the tolerance is tight enough to catch a truncating store */
        int rounded = 0;
        double trunc = 0;
        for (size_t k = 0; k < ref.size() && k < got.size(); k++) {
            if (kinds[k] != 'a') continue;
            vec t = ref[k];
            for (float &x : t) { rounded |= rn(x) != x; x = rz(x); }
            trunc = fmax(trunc, excess(t, ref[k], 'a'));
        }
        if (rounded) CHECK(trunc > 1.0, "%s: truncated outputs would pass (%.3g)\n", name, trunc);
    }
    CHECK(harness_errors() == e0, "%s: the harness reported %ld errors\n", name, harness_errors() - e0);
}

/* the table: every kernel of this file has its own bf16 instantiation */
static void test_table(void) {
    CHECK(F->act_dtype == TRN_F32 && H->act_dtype == TRN_BF16, "act_dtype %d %d\n", F->act_dtype, H->act_dtype);
    int same = 0;
#define K1_PICKED(fn) same += F->fn == H->fn || !H->fn
    K1_PICKED(embedding_forward); K1_PICKED(embedding_backward); K1_PICKED(embedding_backward_rows);
    K1_PICKED(layernorm_forward);
    K1_PICKED(layernorm_backward); K1_PICKED(relu_forward); K1_PICKED(relu_backward); K1_PICKED(add_forward);
    K1_PICKED(accumulate); K1_PICKED(crossentropy_forward); K1_PICKED(crossentropy_backward);
    K1_PICKED(crossentropy_fused);
    K1_PICKED(mse_forward); K1_PICKED(mse_backward); K1_PICKED(meanpool_forward); K1_PICKED(meanpool_backward);
    K1_PICKED(mul_forward); K1_PICKED(mul_backward); K1_PICKED(silu_forward); K1_PICKED(silu_backward);
    K1_PICKED(sigmoid_forward); K1_PICKED(sigmoid_backward); K1_PICKED(tanh_forward); K1_PICKED(tanh_backward);
    K1_PICKED(softmax_forward); K1_PICKED(softmax_backward); K1_PICKED(rmsnorm_forward);
    K1_PICKED(rmsnorm_backward); K1_PICKED(rope_forward); K1_PICKED(rope_backward); K1_PICKED(dropout_forward);
    K1_PICKED(dropout_backward); K1_PICKED(transpose_forward); K1_PICKED(transpose_backward);
    K1_PICKED(slice_forward); K1_PICKED(slice_backward); K1_PICKED(concat_forward); K1_PICKED(concat_backward);
    K1_PICKED(sum_forward); K1_PICKED(sum_backward); K1_PICKED(crossentropy_ex_forward);
    K1_PICKED(crossentropy_ex_backward); K1_PICKED(bce_logits_forward); K1_PICKED(bce_logits_backward);
    K1_PICKED(l1_forward); K1_PICKED(l1_backward); K1_PICKED(huber_forward); K1_PICKED(huber_backward);
#undef K1_PICKED
    CHECK(same == 0, "%d of 47 table entries are the same function in fp32 and bf16\n", same);
}

static void test_embedding(int N, int C, int V) {
    std::vector<int> ids(N);
    for (int i = 0; i < N; i++) ids[i] = (int)(trn_rng_next(&RNG) % (uint64_t)V);
    vec table = randbf((size_t)V * C), g = randbf((size_t)N * C), dt0 = randbf((size_t)V * C);
    dv dids(vec(N), 0);
    F->upload(dids.p, ids.data(), sizeof(int) * N);
    compare("embedding_forward", "x", 0, [&](const trn_backend *be, int bf, int) {
        dv t(table, bf), out(zeros((size_t)N * C), bf);
        be->embedding_forward(out.f(), (const int *)dids.p, t.f(), N, C);
        return outs{out.get()};
    });
    compare("embedding_backward (fp32 dtable)", "f", 1, [&](const trn_backend *be, int bf, int d0) {
        dv dout(g, bf), dt(d0 ? dt0 : zeros(dt0.size()), 0);
        be->embedding_backward(dt.f(), dout.f(), (const int *)dids.p, N, C);
        return outs{dt.get()};
    });
    /* ids of B equal rows (positions; here a row that repeats an id too):
       embedding_backward_rows sums the batch first; against the plain
       kernel on the same ids (the reference, 'f': the same sums in another
       order), in fp32 and in bf16, then fp32 against bf16 as above */
    const int B = 3, T = N / B > 0 ? N / B : 1;
    std::vector<int> rid((size_t)B * T);
    for (int t = 0; t < T; t++) rid[(size_t)t] = t % 2 == 0 ? (int)(trn_rng_next(&RNG) % (uint64_t)V) : t % V;
    if (T > 1) rid[1] = rid[0]; /* a repeat inside the row: those atomics collide */
    for (int b = 1; b < B; b++) memcpy(&rid[(size_t)b * T], rid.data(), sizeof(int) * (size_t)T);
    dv drid(vec((size_t)B * T), 0);
    F->upload(drid.p, rid.data(), sizeof(int) * rid.size());
    vec gr = randbf((size_t)B * T * C);
    for (int bf = 0; bf < 2; bf++) {
        const trn_backend *be = bf ? H : F;
        CHECK(be->embedding_backward_rows != NULL, "no embedding_backward_rows in the %s table\n", bf ? "bf16" : "fp32");
        if (!be->embedding_backward_rows) continue;
        dv dout(gr, bf), a(dt0, 0), r(dt0, 0);
        long e0 = harness_errors();
        be->embedding_backward_rows(a.f(), dout.f(), (const int *)drid.p, B, T, C);
        be->embedding_backward(r.f(), dout.f(), (const int *)drid.p, B * T, C);
        double w = excess(a.get(), r.get(), 'f'), far = excess(a.get(), dt0, 'f');
        printf("embedding_backward_rows C=%d %s: /bound %.3f vs the plain kernel (%.3g from untouched)\n", C,
               bf ? "bf16" : "fp32", w, far);
        CHECK(w <= 1.0 && far > 1.0, "embedding_backward_rows %s: %.3g x the bound from the plain kernel\n",
              bf ? "bf16" : "fp32", w);
        CHECK(harness_errors() == e0, "embedding_backward_rows: %ld harness errors\n", harness_errors() - e0);
    }
    compare("embedding_backward_rows (fp32 dtable)", "f", 1, [&](const trn_backend *be, int bf, int d0) {
        dv dout(gr, bf), dt(d0 ? dt0 : zeros(dt0.size()), 0);
        be->embedding_backward_rows(dt.f(), dout.f(), (const int *)drid.p, B, T, C);
        return outs{dt.get()};
    });
}

static void test_layernorm(int N, int C) {
    vec x = randbf((size_t)N * C, 2.0f), w = randbf(C), b = randbf(C), g = randbf((size_t)N * C);
    vec dx0 = randbf((size_t)N * C), dw0 = randbf(C), db0 = randbf(C), mean(N), rstd(N);
    char name[64];
    snprintf(name, sizeof name, "layernorm_forward C=%d", C);
    compare(name, "axx", 0, [&](const trn_backend *be, int bf, int) {
        dv dx(x, bf), dw(w, bf), db(b, bf), out(zeros(x.size()), bf), m(zeros(N), 0), r(zeros(N), 0);
        be->layernorm_forward(out.f(), m.f(), r.f(), dx.f(), dw.f(), db.f(), N, C);
        if (!bf) { mean = m.get(); rstd = r.get(); } /* fp32 statistics for backward */
        return outs{out.get(), m.get(), r.get()};
    });
    snprintf(name, sizeof name, "layernorm_backward C=%d", C);
    compare(name, "axx", 1, [&](const trn_backend *be, int bf, int d0) {
        dv dout(g, bf), dx(x, bf), dw(w, bf), m(mean, 0), r(rstd, 0);
        dv gx(d0 ? dx0 : zeros(dx0.size()), bf), gw(d0 ? dw0 : zeros(C), 0), gb(d0 ? db0 : zeros(C), 0);
        be->layernorm_backward(gx.f(), gw.f(), gb.f(), dout.f(), dx.f(), dw.f(), m.f(), r.f(), N, C);
        return outs{gx.get(), gw.get(), gb.get()};
    });
}

typedef void (*fw_fn)(float *, const float *, size_t);
typedef void (*bw_fn)(float *, const float *, const float *, size_t);
/* an elementwise pair (fw, bw are offsets of the table's slots) */
static void test_unary(const char *name, fw_fn trn_backend::*fw, bw_fn trn_backend::*bw, size_t n, float scale) {
    vec x = randbf(n, scale), s = randbf(n, scale), g = randbf(n), d0 = randbf(n);
    char label[64];
    snprintf(label, sizeof label, "%s_forward", name);
    compare(label, "a", 0, [&](const trn_backend *be, int bf, int) {
        dv dx(x, bf), out(zeros(n), bf);
        (be->*fw)(out.f(), dx.f(), n);
        return outs{out.get()};
    });
    snprintf(label, sizeof label, "%s_backward", name);
    compare(label, "a", 1, [&](const trn_backend *be, int bf, int from_d0) {
        dv saved(s, bf), dg(g, bf), dd(from_d0 ? d0 : zeros(n), bf);
        (be->*bw)(dd.f(), saved.f(), dg.f(), n);
        return outs{dd.get()};
    });
}

static void test_add_accumulate(size_t n) {
    vec a = randbf(n), b = randbf(n), d0 = randbf(n);
    compare("add_forward", "a", 0, [&](const trn_backend *be, int bf, int) {
        dv da(a, bf), db(b, bf), out(zeros(n), bf);
        be->add_forward(out.f(), da.f(), db.f(), n);
        return outs{out.get()};
    });
    compare("accumulate", "a", 1, [&](const trn_backend *be, int bf, int from_d0) {
        dv src(a, bf), dst(from_d0 ? d0 : zeros(n), bf);
        be->accumulate(dst.f(), src.f(), n);
        return outs{dst.get()};
    });
}

/* mse, l1, huber, bce: fp32 losses from A inputs, A gradients */
static void test_losses(size_t n) {
    vec p = randbf(n, 2.0f), t = randbf(n, 2.0f), y(n), d0 = randbf(n);
    for (size_t i = 0; i < n; i++) y[i] = (float)(trn_rng_next(&RNG) & 1); /* BCE targets */
    const float dloss = 0.37f, delta = 1.0f;
    compare("mse_forward (fp32 losses)", "x", 0, [&](const trn_backend *be, int bf, int) {
        dv dp(p, bf), dt(t, bf), l(zeros(n), 0);
        be->mse_forward(l.f(), dp.f(), dt.f(), n);
        return outs{l.get()};
    });
    compare("mse_backward", "a", 1, [&](const trn_backend *be, int bf, int from_d0) {
        dv dp(p, bf), dt(t, bf), d(from_d0 ? d0 : zeros(n), bf);
        be->mse_backward(d.f(), dp.f(), dt.f(), dloss, n);
        return outs{d.get()};
    });
    compare("l1_forward (fp32 losses)", "x", 0, [&](const trn_backend *be, int bf, int) {
        dv dp(p, bf), dt(t, bf), l(zeros(n), 0);
        be->l1_forward(l.f(), dp.f(), dt.f(), n);
        return outs{l.get()};
    });
    compare("l1_backward", "a", 1, [&](const trn_backend *be, int bf, int from_d0) {
        dv dp(p, bf), dt(t, bf), d(from_d0 ? d0 : zeros(n), bf);
        be->l1_backward(d.f(), dp.f(), dt.f(), dloss, n);
        return outs{d.get()};
    });
    compare("huber_forward (fp32 losses)", "x", 0, [&](const trn_backend *be, int bf, int) {
        dv dp(p, bf), dt(t, bf), l(zeros(n), 0);
        be->huber_forward(l.f(), dp.f(), dt.f(), delta, n);
        return outs{l.get()};
    });
    compare("huber_backward", "a", 1, [&](const trn_backend *be, int bf, int from_d0) {
        dv dp(p, bf), dt(t, bf), d(from_d0 ? d0 : zeros(n), bf);
        be->huber_backward(d.f(), dp.f(), dt.f(), delta, dloss, n);
        return outs{d.get()};
    });
    compare("bce_logits_forward (fp32 losses)", "x", 0, [&](const trn_backend *be, int bf, int) {
        dv dp(p, bf), dy(y, bf), l(zeros(n), 0);
        be->bce_logits_forward(l.f(), dp.f(), dy.f(), n);
        return outs{l.get()};
    });
    compare("bce_logits_backward", "a", 1, [&](const trn_backend *be, int bf, int from_d0) {
        dv dp(p, bf), dy(y, bf), d(from_d0 ? d0 : zeros(n), bf);
        be->bce_logits_backward(d.f(), dp.f(), dy.f(), dloss, n);
        return outs{d.get()};
    });
}

/* cross-entropy, plain and with ignore index and label smoothing: logits
   and dlogits A (padded rows of Vp), losses and lse fp32 */
static void test_crossentropy(int N, int V, int Vp) {
    vec logits = randbf((size_t)N * Vp, 3.0f), d0 = randbf((size_t)N * Vp), lse(N), lse_ex(N);
    std::vector<int> tg(N);
    for (int i = 0; i < N; i++) tg[i] = i % 5 == 3 ? -1 : (int)(trn_rng_next(&RNG) % (uint64_t)V);
    std::vector<int> tg_plain(tg);
    for (int &t : tg_plain) t = t < 0 ? 0 : t;
    dv dtg(vec(N), 0), dtg_plain(vec(N), 0);
    F->upload(dtg.p, tg.data(), sizeof(int) * N);
    F->upload(dtg_plain.p, tg_plain.data(), sizeof(int) * N);
    const float dloss = 1.0f / N, smoothing = 0.1f;
    char name[64];
    /* the forward kernels read a row in 16-byte packs (4 fp32, 8 bf16):
       the two instantiations sum in another order, 'f' */
    snprintf(name, sizeof name, "crossentropy_forward V=%d", V);
    compare(name, "ff", 0, [&](const trn_backend *be, int bf, int) {
        dv l(logits, bf), loss(zeros(N), 0), z(zeros(N), 0);
        be->crossentropy_forward(loss.f(), z.f(), l.f(), (const int *)dtg_plain.p, N, V, Vp);
        if (!bf) lse = z.get();
        return outs{loss.get(), z.get()};
    });
    snprintf(name, sizeof name, "crossentropy_backward V=%d", V);
    compare(name, "a", 1, [&](const trn_backend *be, int bf, int from_d0) {
        dv l(logits, bf), z(lse, 0), d(from_d0 ? d0 : zeros(d0.size()), bf);
        be->crossentropy_backward(d.f(), l.f(), z.f(), (const int *)dtg_plain.p, dloss, N, V, Vp);
        return outs{d.get()};
    });
    /* the classifier's fused kernel: the gradient written over the logits.
       Losses 'f': the fp32 and bf16 instantiations sum a row in another
       order (4 or 8 elements per 16-byte pack). Vp = 1003 starts rows off
       16-byte boundaries (the scalar head), 72 - 67 columns of padding end
       in one pack, and both leave a scalar tail. */
    snprintf(name, sizeof name, "crossentropy_fused V=%d", V);
    compare(name, "fa", 0, [&](const trn_backend *be, int bf, int) {
        dv l(logits, bf), loss(zeros(N), 0);
        be->crossentropy_fused(loss.f(), l.f(), (const int *)dtg_plain.p, dloss, N, V, Vp);
        return outs{loss.get(), l.get()};
    });
    snprintf(name, sizeof name, "crossentropy_ex_forward V=%d", V);
    compare(name, "ff", 0, [&](const trn_backend *be, int bf, int) {
        dv l(logits, bf), loss(zeros(N), 0), z(zeros(N), 0);
        be->crossentropy_ex_forward(loss.f(), z.f(), l.f(), (const int *)dtg.p, N, V, Vp, smoothing);
        if (!bf) lse_ex = z.get();
        return outs{loss.get(), z.get()};
    });
    snprintf(name, sizeof name, "crossentropy_ex_backward V=%d", V);
    compare(name, "a", 1, [&](const trn_backend *be, int bf, int from_d0) {
        dv l(logits, bf), z(lse_ex, 0), d(from_d0 ? d0 : zeros(d0.size()), bf);
        be->crossentropy_ex_backward(d.f(), l.f(), z.f(), (const int *)dtg.p, dloss, N, V, Vp, smoothing);
        return outs{d.get()};
    });
}

/* the fused kernel alone at the classifier's sizes: rows of up to 53,248
   bf16 columns (52,736 fp32) are read once (trn__k_xent_fused_reg: packs
   in registers and shared memory), longer rows take the two-pass kernel.
   Targets in the head (row 1), the body (row 2) and the last real column. */
static void test_crossentropy_fused(int N, int V, int Vp, const char *what) {
    vec logits = randbf((size_t)N * Vp, 3.0f);
    std::vector<int> tg(N);
    for (int i = 0; i < N; i++) tg[i] = (int)(trn_rng_next(&RNG) % (uint64_t)V);
    tg[0] = V - 1;
    if (N > 1) tg[1] = 0;
    if (N > 2) tg[2] = V / 2;
    dv dtg(vec(N), 0);
    F->upload(dtg.p, tg.data(), sizeof(int) * N);
    char name[64];
    snprintf(name, sizeof name, "crossentropy_fused V=%d Vp=%d", V, Vp);
    printf("  (%s)\n", what);
    compare(name, "fa", 0, [&](const trn_backend *be, int bf, int) {
        dv l(logits, bf), loss(zeros(N), 0);
        be->crossentropy_fused(loss.f(), l.f(), (const int *)dtg.p, 1.0f / N, N, V, Vp);
        return outs{loss.get(), l.get()};
    });
}

/* convert (the bf16 step's copies, casts and scaled adds): every dtype
   pair, written and accumulated, scaled. n = 1037: packs of 8 and a
   scalar tail of 5; off = 1 starts both pointers off a 16-byte boundary
   (the element-wise path). The result must be exactly s * src (+ dst),
   rounded once to the destination's type. */
static void test_convert(size_t n) {
    vec src = randbf(n, 3.0f), dst0 = randbf(n);
    const float s = 0.37f;
    long e0 = harness_errors(), bad = 0;
    for (int dt = 0; dt < 2; dt++)
        for (int st = 0; st < 2; st++)
            for (int acc = 0; acc < 2; acc++)
                for (size_t off = 0; off < 2; off++) {
                    dv d(dst0, dt), x(src, st);
                    F->convert((char *)d.p + off * (dt ? 2 : 4), dt ? TRN_BF16 : TRN_F32,
                               (const char *)x.p + off * (st ? 2 : 4), st ? TRN_BF16 : TRN_F32, n - off, acc, s);
                    vec got = d.get();
                    for (size_t i = 0; i < n; i++) {
                        float want = dst0[i];
                        if (i >= off) {
                            want = src[i] * s;
                            if (acc) want += dst0[i];
                            if (dt) want = rn(want);
                        }
                        bad += got[i] != want;
                    }
                }
    printf("%-40s %ld of %zu elements wrong\n", "convert (4 dtype pairs, =, +=, offsets)", bad, 16 * n);
    CHECK(bad == 0, "convert: %ld elements are not s * src (+ dst) rounded once\n", bad);
    CHECK(harness_errors() == e0, "convert: the harness reported %ld errors\n", harness_errors() - e0);
}

static void test_meanpool_sum(int B, int T, int C) {
    vec x = randbf((size_t)B * T * C), g = randbf((size_t)B * C), d0 = randbf((size_t)B * T * C);
    compare("meanpool_forward", "a", 0, [&](const trn_backend *be, int bf, int) {
        dv dx(x, bf), out(zeros((size_t)B * C), bf);
        be->meanpool_forward(out.f(), dx.f(), B, T, C);
        return outs{out.get()};
    });
    compare("meanpool_backward", "a", 1, [&](const trn_backend *be, int bf, int from_d0) {
        dv dg(g, bf), d(from_d0 ? d0 : zeros(d0.size()), bf);
        be->meanpool_backward(d.f(), dg.f(), B, T, C);
        return outs{d.get()};
    });
    int N = B * T;
    vec gs = randbf(N);
    compare("sum_forward", "a", 0, [&](const trn_backend *be, int bf, int) {
        dv dx(x, bf), out(zeros(N), bf);
        be->sum_forward(out.f(), dx.f(), N, (size_t)C, 0.5f);
        return outs{out.get()};
    });
    compare("sum_backward", "a", 1, [&](const trn_backend *be, int bf, int from_d0) {
        dv dg(gs, bf), d(from_d0 ? d0 : zeros(d0.size()), bf);
        be->sum_backward(d.f(), dg.f(), N, (size_t)C, 0.5f);
        return outs{d.get()};
    });
}

static void test_shape_ops(void) {
    size_t n = 1037;
    vec x = randbf(n), g = randbf(n), d0 = randbf(n);
    compare("dropout_forward p=0.3", "a", 0, [&](const trn_backend *be, int bf, int) {
        dv dx(x, bf), out(zeros(n), bf);
        be->dropout_forward(out.f(), dx.f(), n, 0.3f, 12345);
        return outs{out.get()};
    });
    compare("dropout_backward p=0.3", "a", 1, [&](const trn_backend *be, int bf, int from_d0) {
        dv dg(g, bf), d(from_d0 ? d0 : zeros(n), bf);
        be->dropout_backward(d.f(), dg.f(), n, 0.3f, 12345);
        return outs{d.get()};
    });
    const int A = 2, D0 = 3, Bm = 5, D1 = 4, C = 7; /* (2,3,5,4,7) -> (2,4,5,3,7) */
    size_t nt = (size_t)A * D0 * Bm * D1 * C;
    vec xt = randbf(nt), gt = randbf(nt), dt0 = randbf(nt);
    compare("transpose_forward", "x", 0, [&](const trn_backend *be, int bf, int) {
        dv dx(xt, bf), out(zeros(nt), bf);
        be->transpose_forward(out.f(), dx.f(), A, D0, Bm, D1, C);
        return outs{out.get()};
    });
    compare("transpose_backward", "a", 1, [&](const trn_backend *be, int bf, int from_d0) {
        dv dg(gt, bf), d(from_d0 ? dt0 : zeros(nt), bf);
        be->transpose_backward(d.f(), dg.f(), A, D0, Bm, D1, C);
        return outs{d.get()};
    });
    const int N = 37, Cs = 53, start = 5, len = 20, Ca = 20, Cb = 33;
    vec xs = randbf((size_t)N * Cs), gs = randbf((size_t)N * len), ds0 = randbf((size_t)N * Cs);
    compare("slice_forward", "x", 0, [&](const trn_backend *be, int bf, int) {
        dv dx(xs, bf), out(zeros((size_t)N * len), bf);
        be->slice_forward(out.f(), dx.f(), N, Cs, start, len);
        return outs{out.get()};
    });
    compare("slice_backward", "a", 1, [&](const trn_backend *be, int bf, int from_d0) {
        dv dg(gs, bf), d(from_d0 ? ds0 : zeros(ds0.size()), bf);
        be->slice_backward(d.f(), dg.f(), N, Cs, start, len);
        return outs{d.get()};
    });
    vec a = randbf((size_t)N * Ca), b = randbf((size_t)N * Cb), gc = randbf((size_t)N * (Ca + Cb));
    vec da0 = randbf(a.size()), db0 = randbf(b.size());
    compare("concat_forward", "x", 0, [&](const trn_backend *be, int bf, int) {
        dv dA(a, bf), dB(b, bf), out(zeros(gc.size()), bf);
        be->concat_forward(out.f(), dA.f(), dB.f(), N, Ca, Cb);
        return outs{out.get()};
    });
    compare("concat_backward", "aa", 1, [&](const trn_backend *be, int bf, int from_d0) {
        dv dg(gc, bf), gA(from_d0 ? da0 : zeros(a.size()), bf), gB(from_d0 ? db0 : zeros(b.size()), bf);
        be->concat_backward(gA.f(), gB.f(), dg.f(), N, Ca, Cb);
        return outs{gA.get(), gB.get()};
    });
}

/* mul with b broadcast over N rows (db: fp32 column partials, stored as
   A) or of a's shape (N = 1) */
static void test_mul(size_t N, size_t C) {
    vec a = randbf(N * C), b = randbf(C), g = randbf(N * C), da0 = randbf(N * C), db0 = randbf(C);
    char name[64];
    snprintf(name, sizeof name, "mul_forward N=%zu", N);
    compare(name, "a", 0, [&](const trn_backend *be, int bf, int) {
        dv dA(a, bf), dB(b, bf), out(zeros(N * C), bf);
        be->mul_forward(out.f(), dA.f(), dB.f(), N, C);
        return outs{out.get()};
    });
    snprintf(name, sizeof name, "mul_backward N=%zu", N);
    compare(name, "aa", 1, [&](const trn_backend *be, int bf, int from_d0) {
        dv dA(a, bf), dB(b, bf), dg(g, bf), gA(from_d0 ? da0 : zeros(N * C), bf), gB(from_d0 ? db0 : zeros(C), bf);
        be->mul_backward(gA.f(), gB.f(), dg.f(), dA.f(), dB.f(), N, C);
        return outs{gA.get(), gB.get()};
    });
}

static void test_softmax(int N, int C) {
    vec x = randbf((size_t)N * C, 3.0f), y(x.size()), g = randbf(x.size()), d0 = randbf(x.size());
    char name[64];
    snprintf(name, sizeof name, "softmax_forward C=%d", C);
    compare(name, "a", 0, [&](const trn_backend *be, int bf, int) {
        dv dx(x, bf), out(zeros(x.size()), bf);
        be->softmax_forward(out.f(), dx.f(), N, C);
        if (bf) y = out.get(); /* bf16 probabilities for backward */
        return outs{out.get()};
    });
    snprintf(name, sizeof name, "softmax_backward C=%d", C);
    compare(name, "a", 1, [&](const trn_backend *be, int bf, int from_d0) {
        dv dy(y, bf), dg(g, bf), d(from_d0 ? d0 : zeros(d0.size()), bf);
        be->softmax_backward(d.f(), dy.f(), dg.f(), N, C);
        return outs{d.get()};
    });
}

static void test_rmsnorm(int N, int C) {
    vec x = randbf((size_t)N * C, 2.0f), w = randbf(C), g = randbf(x.size()), dx0 = randbf(x.size());
    vec dw0 = randbf(C), rstd(N);
    char name[64];
    snprintf(name, sizeof name, "rmsnorm_forward C=%d", C);
    compare(name, "ax", 0, [&](const trn_backend *be, int bf, int) {
        dv dx(x, bf), dw(w, bf), out(zeros(x.size()), bf), r(zeros(N), 0);
        be->rmsnorm_forward(out.f(), r.f(), dx.f(), dw.f(), N, C, 1e-5f);
        if (!bf) rstd = r.get();
        return outs{out.get(), r.get()};
    });
    snprintf(name, sizeof name, "rmsnorm_backward C=%d", C);
    compare(name, "ax", 1, [&](const trn_backend *be, int bf, int from_d0) {
        dv dout(g, bf), dx(x, bf), dw(w, bf), r(rstd, 0);
        dv gx(from_d0 ? dx0 : zeros(x.size()), bf), gw(from_d0 ? dw0 : zeros(C), 0);
        be->rmsnorm_backward(gx.f(), gw.f(), dout.f(), dx.f(), dw.f(), r.f(), N, C);
        return outs{gx.get(), gw.get()};
    });
}

static void test_rope(int B, int T, int H, int R, int hs, int pos0) {
    size_t n = (size_t)B * T * H * hs;
    vec x = randbf(n), g = randbf(n), d0 = randbf(n);
    compare("rope_forward", "a", 0, [&](const trn_backend *be, int bf, int) {
        dv dx(x, bf), out(zeros(n), bf);
        be->rope_forward(out.f(), dx.f(), B, T, H, R, hs, pos0, 10000.0f, NULL);
        return outs{out.get()};
    });
    compare("rope_backward", "a", 1, [&](const trn_backend *be, int bf, int from_d0) {
        dv dg(g, bf), d(from_d0 ? d0 : zeros(n), bf);
        be->rope_backward(d.f(), dg.f(), B, T, H, R, hs, pos0, 10000.0f, NULL);
        return outs{d.get()};
    });
}

int main(int argc, char **argv) {
    trn_rng_seed(&RNG, argc > 1 ? strtoull(argv[1], NULL, 10) : 1);
    trn_set_threads(1);
    test_conversions();
    if (trn_cuda_init(0) != TRN_OK) {
        printf("no CUDA device (%s): nothing more to test\n", trn_error_reason());
        return check_summary();
    }
    /* one copy of the table per precision (the backend refills its own) */
    CHECK(trn_cuda_set_precision(TRN_CUDA_FP32) == TRN_OK, "set fp32: %s\n", trn_error_reason());
    F32T = *trn_cuda_backend();
    CHECK(trn_cuda_set_precision(TRN_CUDA_BF16) == TRN_OK, "set bf16: %s\n", trn_error_reason());
    BF16T = *trn_cuda_backend();
    CHECK(trn_cuda_set_precision(TRN_CUDA_TF32) == TRN_OK, "set tf32: %s\n", trn_error_reason());
    test_table();

    test_embedding(37, 53, 7);
    test_layernorm(37, 53);
    test_layernorm(37, 777); /* 24 or 25 terms per lane */
    test_layernorm(37, 768); /* GPT-2's C: 16-byte packs, 3 a lane */
    test_embedding(37, 64, 7); /* 16-byte packs */
    test_convert(1037);
    test_unary("relu", &trn_backend::relu_forward, &trn_backend::relu_backward, 1037, 1.0f);
    test_unary("silu", &trn_backend::silu_forward, &trn_backend::silu_backward, 1037, 3.0f);
    test_unary("sigmoid", &trn_backend::sigmoid_forward, &trn_backend::sigmoid_backward, 1037, 3.0f);
    test_unary("tanh", &trn_backend::tanh_forward, &trn_backend::tanh_backward, 1037, 3.0f);
    test_add_accumulate(1037);
    test_losses(1037);
    test_crossentropy(37, 67, 72);
    test_crossentropy(9, 1000, 1003);
    test_crossentropy_fused(3, 50257, 50304, "GPT-2: one read in bf16 and fp32");
    test_crossentropy_fused(3, 53000, 53001, "bf16 one read, fp32 two-pass; rows 1, 2 unaligned");
    test_crossentropy_fused(2, 53249, 53249, "two-pass in bf16 and fp32; row 1 unaligned");
    test_meanpool_sum(3, 13, 53);
    test_shape_ops();
    test_mul(37, 53);
    test_mul(1, 1037);
    test_softmax(37, 53);
    test_softmax(5, 777);
    test_rmsnorm(37, 53);
    test_rmsnorm(11, 777);
    test_rmsnorm(11, 768); /* 16-byte packs, 3 a lane */
    test_rope(2, 13, 4, 2, 6, 0);
    test_rope(1, 5, 3, 1, 8, 1000);
    /* last (the random draws of the tests above stay as they were) */
    test_layernorm(200, 264);  /* the one-launch backward: 4 blocks of 8 warps (the last short), 2 packs a lane */
    test_layernorm(70, 1024);  /* 4 packs a lane (its widest), 2 blocks */
    test_layernorm(1100, 264); /* 18 blocks in 2 groups: two levels of last blocks */
    test_layernorm(9, 1032);   /* wider than 1024: the dx kernel, then the partials kernel */
    trn_cuda_shutdown();
    return check_summary();
}
