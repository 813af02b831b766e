// build: -O1 -g1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined -Wno-maybe-uninitialized
/* tests/test_cuda_train.cpp - the training API on the CUDA backend, its
   kernels run on the CPU by tests/cuda_on_cpu.h (tests/test_cuda_train_gpu.cu
   is the same file for nvcc and a real GPU):
     - the SGD kernel against trn_sgd_update (plain, momentum + dampening +
       weight decay, Nesterov; first step and later steps);
     - gradient accumulation: K micro-batches with trn_backward_scaled(1/K)
       give the gradient of one big batch, and the CUDA gradient matches
       the CPU one;
     - SGD with momentum through a checkpoint: resumed bit for bit;
     - attention over a key/value cache (generation), grouped-query heads.
   Tolerances: 1e-6 for the elementwise SGD update (FMA contraction on a
   GPU), 1e-5 relative for gradients of a small MLP. */
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
#include <unistd.h>
#include <vector>

#include "tests/cuda_fixtures.h" /* vec, GPU, CPU, RNG, randn, maxdiff */

static float *dev(const vec &h) {
    float *p = (float *)GPU->alloc(h.size() * 4, TRN_KIND_TEMP);
    GPU->upload(p, h.data(), h.size() * 4);
    return p;
}
static vec host(const float *d, size_t n) {
    vec h(n);
    GPU->download(h.data(), d, n * 4);
    return h;
}
/* ---- the SGD kernel ------------------------------------------------------ */
static void test_sgd_kernel(size_t n, float mom, float damp, float wd, int nesterov) {
    long e0 = harness_errors();
    vec p = randn(n), buf = randn(n);
    float *dp = dev(p), *db = dev(buf);
    double d = 0;
    for (int s = 0; s < 3; s++) {
        vec g = randn(n);
        float *dg = dev(g);
        int first = s == 0;
        trn_sgd_update(p.data(), g.data(), mom != 0 ? buf.data() : NULL, n, 0.1f, mom, damp, wd, nesterov, first);
        GPU->sgd_update(dp, dg, mom != 0 ? db : NULL, n, 0.1f, mom, damp, wd, nesterov, first);
        GPU->free(dg);
        d = fmax(d, maxdiff(host(dp, n), p));
        d = fmax(d, maxdiff(host(db, n), buf));
    }
    CHECK(d <= 1e-6, "sgd_update momentum %g dampening %g wd %g nesterov %d: max|cuda-cpu| %.3g\n", mom, damp, wd,
          nesterov, d);
    CHECK(harness_errors() == e0, "sgd_update: harness errors\n");
    printf("ok - sgd_update (momentum %.1f dampening %.1f wd %.2f nesterov %d) n=%zu: max|cuda-cpu| %.3g\n", mom, damp,
           wd, nesterov, n, d);
    GPU->free(dp);
    GPU->free(db);
}

/* ---- attention over a key/value cache ------------------------------------- */
static void test_attention_kv(int B, int T, int pos, int maxT, int NH, int NKV, int hs) {
    long e0 = harness_errors();
    int C = NH * hs, Ckv = NKV * hs, P = pos + T, W = C + 2 * Ckv;
    vec qkv = randn((size_t)B * T * W), kc = randn((size_t)B * maxT * Ckv), vc = randn((size_t)B * maxT * Ckv);
    vec out((size_t)B * T * C), att((size_t)B * NH * T * P);
    float *dqkv = dev(qkv), *dkc = dev(kc), *dvc = dev(vc), *dout = dev(out), *datt = dev(att);
    trn_attention_kv_forward(out.data(), att.data(), qkv.data(), W, qkv.data() + C, qkv.data() + C + Ckv, W, kc.data(),
                             vc.data(), B, T, pos, maxT, NH, NKV, hs);
    GPU->attention_kv_forward(dout, datt, dqkv, W, dqkv + C, dqkv + C + Ckv, W, dkc, dvc, B, T, pos, maxT, NH, NKV, hs);
    double d = maxdiff(host(dout, out.size()), out), dc = fmax(maxdiff(host(dkc, kc.size()), kc), maxdiff(host(dvc, vc.size()), vc));
    CHECK(d <= 1e-5 && dc == 0, "attention_kv B=%d T=%d pos=%d NH=%d NKV=%d: out %.3g, caches %.3g\n", B, T, pos, NH, NKV, d, dc);
    CHECK(harness_errors() == e0, "attention_kv: harness errors\n");
    printf("ok - attention_kv_forward B=%d T=%d pos=%d heads %d/%d: max|cuda-cpu| %.3g, caches equal\n", B, T, pos, NH,
           NKV, d);
    GPU->free(dqkv); GPU->free(dkc); GPU->free(dvc); GPU->free(dout); GPU->free(datt);
}

/* ---- a small MLP classifier on either backend ------------------------------ */
enum { N = 12, C = 5, H = 33, V = 7 };
static float X[N * C];
static int Y[N];

static void mlp_make(trn_model *m, const trn_backend *be) {
    trn_rng rng;
    trn_model_init(m, be);
    trn_param2(m, "w1", H, C); trn_param1(m, "b1", H);
    trn_param2(m, "w2", V, H); trn_param1(m, "b2", V);
    trn_model_alloc(m);
    trn_rng_seed(&rng, 11);
    for (int i = 0; i < m->n_params; i++) trn_init_normal(m, m->params[i], 0.0f, 0.5f, &rng);
}
static void accumulate(trn_model *m, int K) {
    int rows = N / K, shape[2] = {rows, C};
    trn_zero_grad(m);
    for (int k = 0; k < K; k++) {
        trn_reset(m);
        trn_tensor *x = trn_input(m, "x", 2, shape, X + k * rows * C);
        trn_tensor *h = trn_gelu(m, trn_linear(m, x, trn_model_find(m, "w1"), trn_model_find(m, "b1")));
        trn_tensor *loss = trn_cross_entropy(m, trn_linear(m, h, trn_model_find(m, "w2"), trn_model_find(m, "b2")),
                                             Y + k * rows, V);
        trn_backward_scaled(m, loss, 1.0f / (float)K);
    }
}
static double rel(const vec &a, const vec &b) {
    double num = 0, den = 0;
    for (size_t i = 0; i < a.size(); i++) { num += (a[i] - b[i]) * (double)(a[i] - b[i]); den += b[i] * (double)b[i]; }
    return sqrt(num / den);
}

static void test_accumulation(void) {
    long e0 = harness_errors();
    trn_model cpu, gk, g1;
    mlp_make(&cpu, CPU);
    mlp_make(&g1, GPU);
    mlp_make(&gk, GPU);
    accumulate(&cpu, 1);
    accumulate(&g1, 1);
    accumulate(&gk, 4);
    size_t n = cpu.n_floats;
    vec gc(cpu.grad_data, cpu.grad_data + n), gg1 = host(g1.grad_data, n), ggk = host(gk.grad_data, n);
    double r1 = rel(ggk, gg1), r2 = rel(gg1, gc);
    CHECK(r1 < 1e-6, "cuda: 4 micro-batches vs one batch: gradient off by %.3g relative\n", r1);
    CHECK(r2 < 1e-5, "cuda vs cpu gradient: %.3g relative\n", r2);
    CHECK(harness_errors() == e0, "accumulation: harness errors\n");
    printf("ok - gradient accumulation on cuda: K=4 vs one batch %.2g, cuda vs cpu %.2g (relative)\n", r1, r2);
    trn_model_free(&cpu); trn_model_free(&g1); trn_model_free(&gk);
}

/* ---- SGD state through a checkpoint, on the device -------------------------- */
static void steps(trn_model *m, trn_adamw *o, int a, int b) {
    for (int s = a; s < b; s++) {
        accumulate(m, 3);
        if (trn_adamw_step(o, m, 0.02f * (float)(s + 1)) != TRN_OK) trn_fatal("step: %s", trn_error_reason());
    }
}
static void test_sgd_checkpoint(void) {
    trn_model a, b;
    trn_adamw oa, ob;
    trn_adamw_desc d;
    char path[256];
    memset(&d, 0, sizeof d);
    d.algo = TRN_OPTIM_SGD; d.momentum = 0.9f; d.dampening = 0.1f; d.weight_decay = 0.01f;
    snprintf(path, sizeof path, "/tmp/test_cuda_train_%ld.safetensors", (long)getpid());
    mlp_make(&a, GPU);
    mlp_make(&b, GPU);
    trn_param_group(&a, "b*", 2.0f, 0.0f); /* biases: lr x 2, no decay */
    trn_param_group(&b, "b*", 2.0f, 0.0f);
    trn_adamw_init(&oa, &d);
    trn_adamw_init(&ob, NULL);
    steps(&a, &oa, 0, 2);
    CHECK(trn_checkpoint_save(path, &a, &oa, NULL) == TRN_OK, "save: %s\n", trn_error_reason());
    CHECK(trn_checkpoint_load(path, &b, &ob, NULL) == TRN_OK, "load: %s\n", trn_error_reason());
    steps(&a, &oa, 2, 5);
    steps(&b, &ob, 2, 5);
    size_t n = a.n_floats;
    vec wa = host(a.param_data, n), wb = host(b.param_data, n), ma = host(oa.m, n), mb = host(ob.m, n);
    CHECK(memcmp(wa.data(), wb.data(), n * 4) == 0 && memcmp(ma.data(), mb.data(), n * 4) == 0,
          "cuda SGD resume is not bit-exact\n");
    printf("ok - cuda: SGD momentum through a checkpoint, resumed bit for bit\n");
    unlink(path);
    trn_adamw_free(&oa); trn_adamw_free(&ob);
    trn_model_free(&a); trn_model_free(&b);
}

int main(void) {
    trn_rng_seed(&RNG, 5);
    trn_set_threads(1);
    trn_cuda_set_tf32(0);
    if (trn_cuda_init(0) != TRN_OK) {
        printf("no CUDA device (%s): nothing to test\n", trn_error_reason());
        return check_summary();
    }
    CPU = trn_cpu_backend();
    GPU = trn_cuda_backend();
    for (int i = 0; i < N * C; i++) X[i] = trn_rng_normal(&RNG);
    for (int i = 0; i < N; i++) Y[i] = (int)trn_rng_below(&RNG, V);
    test_sgd_kernel(1001, 0.0f, 0.0f, 0.0f, 0);
    test_sgd_kernel(1001, 0.9f, 0.1f, 0.01f, 0);
    test_sgd_kernel(1001, 0.8f, 0.0f, 0.05f, 1);
    test_accumulation();
    test_sgd_checkpoint();
    test_attention_kv(2, 5, 7, 16, 4, 2, 8);   /* grouped-query, a prefill after 7 */
    test_attention_kv(1, 1, 12, 13, 3, 3, 16); /* one new token fills the cache     */
    test_attention_kv(1, 9, 0, 9, 6, 1, 5);    /* prefill from 0, one kv head       */
    trn_cuda_shutdown();
    return check_summary();
}
