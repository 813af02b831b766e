/* tests/cuda_fixtures.h - what the CUDA kernel tests share: random host
   vectors, device copies that free themselves, and the largest difference
   between two results. Include after train_cuda.h (and, on the CPU,
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
#endif
