/* tests/cuda_fixtures.h - what the CUDA kernel tests share: random host
   vectors, device copies that free themselves (fp32, or bf16 from floats),
   the largest difference between two results, and the worst difference
   measured in tolerances. Include after train_cuda.h (and, on the CPU,
   tests/cuda_on_cpu.h), in C++. The test sets GPU (and CPU) before it
   makes a dbuf: GPU = trn_cuda_backend(), CPU = trn_cpu_backend(). */
#ifndef TESTS_CUDA_FIXTURES_H
#define TESTS_CUDA_FIXTURES_H
#include <math.h>
#include <vector>

typedef std::vector<float> vec;
static const trn_backend *GPU __attribute__((unused)), *CPU __attribute__((unused));
static trn_rng RNG;

/* n normal samples times scale, from RNG (seeded by the test) */
static vec randn(size_t n, float scale = 1.0f) {
    vec v(n);
    for (size_t i = 0; i < n; i++) v[i] = scale * trn_rng_normal(&RNG);
    return v;
}

/* a device copy of host data (or of nothing: host NULL) that frees itself */
struct dbuf {
    void *p = nullptr;
    size_t bytes = 0;
    dbuf(const void *host, size_t b) : bytes(b) {
        p = GPU->alloc(b ? b : 1, TRN_KIND_TEMP);
        if (!p) trn_fatal("test: %s", trn_error_reason());
        if (host && b) GPU->upload(p, host, b);
    }
    explicit dbuf(const vec &v) : dbuf(v.data(), v.size() * sizeof(float)) {}
    ~dbuf() { GPU->free(p); }
    float *f() { return (float *)p; }
    int *i() { return (int *)p; }
    vec get() {
        vec h(bytes / sizeof(float));
        GPU->download(h.data(), p, bytes);
        return h;
    }
};

/* max |a - b| over the elements; INFINITY for different sizes; NaN wins */
static double maxdiff(const vec &a, const vec &b) {
    double d = 0;
    if (a.size() != b.size()) return INFINITY;
    for (size_t i = 0; i < a.size(); i++) {
        double e = fabs((double)a[i] - (double)b[i]);
        if (!(e <= d)) d = e;
    }
    return d;
}
/* ---- bf16 tests: values rounded to bf16, so CPU and GPU see the same
   numbers; a device buffer of bf16 (from floats) or of fp32 */
static float bf(float x) { return __bfloat162float(__float2bfloat16(x)); }
static vec randn_bf(size_t n) {
    vec v(n);
    for (size_t i = 0; i < n; i++) v[i] = bf(trn_rng_normal(&RNG));
    return v;
}
struct dbuf_bf {
    void *p = nullptr;
    size_t n = 0;
    int is_bf16 = 0;
    dbuf_bf(const vec &h, int b16) : n(h.size()), is_bf16(b16) {
        p = GPU->alloc(n * esize() + 16, TRN_KIND_TEMP); /* +16: a 16-byte load past the end stays inside */
        if (!p) trn_fatal("test: %s", trn_error_reason());
        if (b16) {
            std::vector<__nv_bfloat16> t(n);
            for (size_t i = 0; i < n; i++) t[i] = __float2bfloat16(h[i]);
            GPU->upload(p, t.data(), n * 2);
        } else {
            GPU->upload(p, h.data(), n * 4);
        }
    }
    ~dbuf_bf() { GPU->free(p); }
    size_t esize() const { return is_bf16 ? 2 : 4; }
    float *f() { return (float *)p; }
    vec get() {
        vec h(n);
        if (is_bf16) {
            std::vector<__nv_bfloat16> t(n);
            GPU->download(t.data(), p, n * 2);
            for (size_t i = 0; i < n; i++) h[i] = __bfloat162float(t[i]);
        } else {
            GPU->download(h.data(), p, n * 4);
        }
        return h;
    }
};

/* max over elements of |got - want| / tol[i] (<= 1 passes); a NaN is the
   worst there is and stops the search (a later finite one must not hide
   it); worst_at: where the last call found its maximum */
static size_t worst_at __attribute__((unused));
__attribute__((unused)) static double worst(const vec &got, const vec &want, const std::vector<double> &tol) {
    double w = 0;
    worst_at = 0;
    if (got.size() != want.size() || tol.size() < got.size()) return INFINITY;
    for (size_t i = 0; i < got.size(); i++) {
        double r = fabs((double)got[i] - (double)want[i]) / tol[i];
        if (r != r) { worst_at = i; return r; }
        if (!(r <= w)) { w = r; worst_at = i; }
    }
    return w;
}
#endif
