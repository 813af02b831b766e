// build: -O1 -g1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined -Wno-maybe-uninitialized
/* tests/test_cuda_ops_decoder.cpp - the CUDA kernels of the >>ops2 ops (mul, SiLU,
   sigmoid, tanh, softmax, RMSNorm, RoPE) against the CPU backend, run on
   the CPU by tests/cuda_on_cpu.h (threads as fibers in a random order,
   device memory under AddressSanitizer), as tests/test_cuda_kernels.cpp
   does for the kit's first ops. Then one training step of a small Llama
   block (RMSNorm, RoPE, attention, SwiGLU) through both backends, and the
   public op API on the CUDA backend (a user op's cuda slots).

   Shapes are odd on purpose (37 rows, 53 channels). Backward kernels
   accumulate, so every gradient starts from nonzero values. Tolerances:
   1e-5 for elementwise math (expf/tanhf may differ by an ulp on a GPU),
   2e-5 for row reductions over ~50 terms, 1e-4 for column sums over 37
   rows. tests/test_cuda_ops_decoder_gpu.cu is the same file for a real GPU. */
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

#include "tests/cuda_fixtures.h" // vec, GPU, CPU, RNG, randn, dbuf, maxdiff
static void report(const char *name, double diff, double tol, long err0) {
    printf("%-36s max|cuda-cpu| %.3g (tol %.1g)\n", name, diff, tol);
    CHECK(diff <= tol, "%s: max|cuda-cpu| = %.3g > tol %.3g\n", name, diff, tol);
    CHECK(harness_errors() == err0, "%s: the harness reported %ld errors\n", name, harness_errors() - err0);
}

static void test_mul(size_t N, size_t C, const char *name) {
    long e0 = harness_errors();
    size_t nb = N == 1 ? C : C; /* b is one row of C (N rows share it) */
    vec a = randn(N * C), b = randn(nb), out_c(N * C);
    trn_mul_forward(out_c.data(), a.data(), b.data(), N, C);
    dbuf da(a), db(b), dout(NULL, out_c.size() * 4);
    GPU->mul_forward(dout.f(), da.f(), db.f(), N, C);
    char label[64];
    snprintf(label, sizeof label, "mul_forward %s", name);
    report(label, maxdiff(dout.get(), out_c), 0.0, e0);
    vec g = randn(N * C), ga0 = randn(N * C), gb0 = randn(nb), ga_c = ga0, gb_c = gb0;
    trn_mul_backward(ga_c.data(), gb_c.data(), g.data(), a.data(), b.data(), N, C);
    dbuf dg(g), dga(ga0), dgb(gb0);
    GPU->mul_backward(dga.f(), dgb.f(), dg.f(), da.f(), db.f(), N, C);
    snprintf(label, sizeof label, "mul_backward %s", name);
    report(label, fmax(maxdiff(dga.get(), ga_c), maxdiff(dgb.get(), gb_c)), 1e-4, e0);
}

typedef void (*fw_fn)(float *, const float *, size_t);
typedef void (*bw_fn)(float *, const float *, const float *, size_t);
/* an elementwise pair; from_out: backward reads the output, else the input */
static void test_unary(const char *name, fw_fn cf, bw_fn cb, fw_fn gf, bw_fn gb, int from_out, size_t n) {
    long e0 = harness_errors();
    vec x = randn(n, 3.0f), y_c(n);
    cf(y_c.data(), x.data(), n);
    dbuf dx(x), dy(NULL, n * 4);
    gf(dy.f(), dx.f(), n);
    char label[64];
    snprintf(label, sizeof label, "%s_forward", name);
    report(label, maxdiff(dy.get(), y_c), 1e-5, e0);
    vec g = randn(n), d0 = randn(n), d_c = d0;
    cb(d_c.data(), from_out ? y_c.data() : x.data(), g.data(), n);
    dbuf dg(g), dd(d0);
    gb(dd.f(), from_out ? dy.f() : dx.f(), dg.f(), n);
    snprintf(label, sizeof label, "%s_backward", name);
    report(label, maxdiff(dd.get(), d_c), 1e-5, e0);
}

static void test_softmax(int N, int C) {
    long e0 = harness_errors();
    vec x = randn((size_t)N * C, 3.0f), y_c((size_t)N * C);
    trn_softmax_forward(y_c.data(), x.data(), N, C);
    dbuf dx(x), dy(NULL, y_c.size() * 4);
    GPU->softmax_forward(dy.f(), dx.f(), N, C);
    report("softmax_forward", maxdiff(dy.get(), y_c), 1e-6, e0);
    vec g = randn(y_c.size()), d0 = randn(y_c.size()), d_c = d0;
    trn_softmax_backward(d_c.data(), y_c.data(), g.data(), N, C);
    dbuf dg(g), dd(d0);
    GPU->softmax_backward(dd.f(), dy.f(), dg.f(), N, C);
    report("softmax_backward", maxdiff(dd.get(), d_c), 2e-5, e0);
}

static void test_rmsnorm(int N, int C) {
    long e0 = harness_errors();
    vec x = randn((size_t)N * C, 2.0f), w = randn((size_t)C), y_c((size_t)N * C), r_c((size_t)N);
    trn_rmsnorm_forward(y_c.data(), r_c.data(), x.data(), w.data(), N, C, 1e-5f);
    dbuf dx(x), dw(w), dy(NULL, y_c.size() * 4), dr(NULL, (size_t)N * 4);
    GPU->rmsnorm_forward(dy.f(), dr.f(), dx.f(), dw.f(), N, C, 1e-5f);
    report("rmsnorm_forward", fmax(maxdiff(dy.get(), y_c), maxdiff(dr.get(), r_c)), 2e-5, e0);
    vec g = randn(y_c.size()), gx0 = randn(y_c.size()), gw0 = randn((size_t)C), gx_c = gx0, gw_c = gw0;
    trn_rmsnorm_backward(gx_c.data(), gw_c.data(), g.data(), x.data(), w.data(), r_c.data(), N, C);
    dbuf dg(g), dgx(gx0), dgw(gw0);
    GPU->rmsnorm_backward(dgx.f(), dgw.f(), dg.f(), dx.f(), dw.f(), dr.f(), N, C);
    report("rmsnorm_backward", fmax(maxdiff(dgx.get(), gx_c), maxdiff(dgw.get(), gw_c)), 1e-4, e0);
}

static void test_rope(int B, int T, int NH, int NKV, int hs, int pos0, const trn_rope_scaling *sc = NULL,
                      const char *what = "plain") {
    long e0 = harness_errors();
    int H = NH + 2 * NKV, R = NH + NKV;
    size_t n = (size_t)B * T * H * hs;
    vec x = randn(n), y_c(n);
    trn_rope_forward(y_c.data(), x.data(), B, T, H, R, hs, pos0, 10000.0f, sc);
    dbuf dx(x), dy(NULL, n * 4);
    GPU->rope_forward(dy.f(), dx.f(), B, T, H, R, hs, pos0, 10000.0f, sc);
    char label[64];
    snprintf(label, sizeof label, "rope_forward %s pos0=%d", what, pos0);
    report(label, maxdiff(dy.get(), y_c), 1e-5, e0);
    vec g = randn(n), d0 = randn(n), d_c = d0;
    trn_rope_backward(d_c.data(), g.data(), B, T, H, R, hs, pos0, 10000.0f, sc);
    dbuf dg(g), dd(d0);
    GPU->rope_backward(dd.f(), dg.f(), B, T, H, R, hs, pos0, 10000.0f, sc);
    snprintf(label, sizeof label, "rope_backward %s pos0=%d", what, pos0);
    report(label, maxdiff(dd.get(), d_c), 1e-5, e0);
}

/* --- a Llama block, one training step on both backends ------------------- */
struct block { trn_model m; trn_tensor *wq, *n1, *n2, *w1, *w2, *w3, *wo; };
static void block_init(block *k, const trn_backend *be, int C, int NH) {
    trn_model_init(&k->m, be);
    k->wq = trn_param2(&k->m, "wqkv", 3 * C, C);
    k->wo = trn_param2(&k->m, "wo", C, C);
    k->n1 = trn_param1(&k->m, "n1", C);
    k->n2 = trn_param1(&k->m, "n2", C);
    k->w1 = trn_param2(&k->m, "w1", 2 * C, C);
    k->w3 = trn_param2(&k->m, "w3", 2 * C, C);
    k->w2 = trn_param2(&k->m, "w2", C, 2 * C);
    if (trn_model_alloc(&k->m) != TRN_OK) trn_fatal("alloc: %s", trn_error_reason());
    trn_rng r;
    trn_rng_seed(&r, 7);
    for (int i = 0; i < k->m.n_params; i++) {
        trn_tensor *p = k->m.params[i];
        if (p->ndim == 1) trn_init_const(&k->m, p, 1.0f);
        else trn_init_normal(&k->m, p, 0.0f, 0.2f, &r);
    }
}
static float block_loss(block *k, const float *x, const float *target, int B, int T, int C, int NH) {
    trn_model *m = &k->m;
    int shape[3] = {B, T, C};
    trn_reset(m);
    trn_tensor *h = trn_input(m, "x", 3, shape, x);
    trn_tensor *qkv = trn_rope(m, trn_linear(m, trn_rmsnorm(m, h, k->n1, 1e-5f), k->wq, NULL), NH, NH, 10000.0f, 0);
    h = trn_add(m, h, trn_linear(m, trn_attention(m, qkv, NH, 1), k->wo, NULL));
    trn_tensor *u = trn_rmsnorm(m, h, k->n2, 1e-5f);
    trn_tensor *g = trn_mul(m, trn_silu(m, trn_linear(m, u, k->w1, NULL)), trn_linear(m, u, k->w3, NULL));
    h = trn_add(m, h, trn_linear(m, g, k->w2, NULL));
    trn_tensor *loss = trn_mse(m, trn_tanh(m, trn_mul(m, h, k->n1)), target);
    trn_zero_grad(m);
    trn_backward(m, loss);
    return trn_item(m, loss);
}
static void test_block(void) {
    const int B = 2, T = 7, C = 24, NH = 3;
    long e0 = harness_errors();
    vec x = randn((size_t)B * T * C), target = randn((size_t)B * T * C, 0.5f);
    block kc, kg;
    block_init(&kc, trn_cpu_backend(), C, NH);
    block_init(&kg, GPU, C, NH);
    float lc = block_loss(&kc, x.data(), target.data(), B, T, C, NH);
    float lg = block_loss(&kg, x.data(), target.data(), B, T, C, NH);
    vec gc(kc.m.n_floats), gg(kg.m.n_floats);
    memcpy(gc.data(), kc.m.grad_data, gc.size() * 4);
    GPU->download(gg.data(), kg.m.grad_data, gg.size() * 4);
    report("llama block: loss", fabs((double)lc - lg), 1e-5, e0);
    report("llama block: every gradient", maxdiff(gg, gc), 1e-4, e0);
    trn_model_free(&kc.m);
    trn_model_free(&kg.m);
}

/* --- the public op API on the device: a user op with its own CUDA kernel ---- */
/* written as a user would, with public names only (TRN_CUDA_LAUNCH is
   <<<>>> under nvcc and the harness here) */
static __global__ void user_twice_k(float *y, const float *x, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i];
}
static __global__ void user_twice_bw_k(float *dx, const float *dy, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dx[i] += 2.0f * dy[i];
}
static void user_twice_gpu_fw(trn_model *m, trn_tape_entry *e) {
    size_t n = e->out->size;
    TRN_CUDA_LAUNCH(user_twice_k, dim3((unsigned)((n + 255) / 256)), dim3(256), 0, (cudaStream_t)trn_cuda_stream(),
                    e->out->data, (const float *)e->in[0]->data, n);
}
static void user_twice_gpu_bw(trn_model *m, trn_tape_entry *e) {
    size_t n = e->out->size;
    float *dx = trn_grad(m, e->in[0]);
    if (dx)
        TRN_CUDA_LAUNCH(user_twice_bw_k, dim3((unsigned)((n + 255) / 256)), dim3(256), 0,
                        (cudaStream_t)trn_cuda_stream(), dx, (const float *)trn_grad(m, e->out), n);
}
static const trn_op USER_TWICE = {"twice", NULL, NULL, user_twice_gpu_fw, user_twice_gpu_bw, 0};
static trn_tensor *g_twice(trn_model *m, void *u) {
    trn_tensor *x = (trn_tensor *)u, *y = trn_tensor_new(m, "twice", x->ndim, x->shape);
    trn_op_apply(m, &USER_TWICE, y, x, NULL, NULL, NULL);
    return trn_tanh(m, y);
}
static void test_user_op(void) {
    trn_model m;
    trn_gradcheck_result r;
    trn_model_init(&m, GPU);
    trn_tensor *x = trn_param2(&m, "x", 3, 5);
    trn_model_alloc(&m);
    trn_rng rng;
    trn_rng_seed(&rng, 3);
    trn_init_normal(&m, x, 0.0f, 0.5f, &rng);
    int bad = trn_gradcheck(&m, g_twice, x, NULL, &r);
    CHECK(bad == 0 && r.checked == 15 && r.largest > 1e-3, "user op on CUDA: %d of %d off\n", bad, r.checked);
    printf("user op through its cuda slots: gradcheck on the device backend, %d elements, worst %.3f of tolerance\n",
           r.checked, r.worst);
    trn_model_free(&m);
}

int main(int argc, char **argv) {
    trn_rng_seed(&RNG, argc > 1 ? strtoull(argv[1], NULL, 10) : 1);
    trn_set_threads(1);
    trn_cuda_set_tf32(0); /* fp32 GEMMs: the block's loss and grads match to rounding */
    if (trn_cuda_init(0) != TRN_OK) {
        printf("no CUDA device (%s): nothing to test\n", trn_error_reason());
        return check_summary();
    }
    GPU = trn_cuda_backend();
    test_mul(1, 1001, "(same shape)");
    test_mul(37, 53, "(row broadcast)");
    test_unary("silu", trn_silu_forward, trn_silu_backward, GPU->silu_forward, GPU->silu_backward, 0, 1001);
    test_unary("sigmoid", trn_sigmoid_forward, trn_sigmoid_backward, GPU->sigmoid_forward, GPU->sigmoid_backward, 1, 1001);
    test_unary("tanh", trn_tanh_forward, trn_tanh_backward, GPU->tanh_forward, GPU->tanh_backward, 1, 1001);
    test_softmax(37, 53);
    test_rmsnorm(37, 53);
    test_rmsnorm(37, 768); /* 16-byte packs (C a multiple of 8), 3 a lane */
    test_rope(2, 13, 4, 2, 6, 0);
    test_rope(1, 5, 3, 1, 8, 1000);
    { // the scaled frequencies reach the kernel (Llama 3.1's numbers; context 64 for dynamic)
        trn_rope_scaling lin = {TRN_ROPE_LINEAR, 4.0f, 0, 0, 0}, dyn = {TRN_ROPE_DYNAMIC, 2.0f, 0, 0, 64},
                         l3 = {TRN_ROPE_LLAMA3, 8.0f, 1.0f, 4.0f, 64};
        test_rope(1, 5, 3, 1, 16, 1000, &lin, "linear");
        test_rope(1, 5, 3, 1, 16, 1000, &dyn, "dynamic");
        test_rope(1, 5, 3, 1, 16, 1000, &l3, "llama3");
    }
    test_block();
    test_user_op();
    trn_cuda_shutdown();
    return check_summary();
}
