// build: -O1 -g1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined -Wno-maybe-uninitialized
// requires: test -f examples/custom_op.c
/* tests/test_cuda_custom_op.cpp - examples/custom_op.c's CUDA kernels (the
   swish op's cuda_forward / cuda_backward slots) run on the CPU by
   tests/cuda_on_cpu.h: the model's output, loss and every gradient on the
   CUDA backend against the CPU backend, and trn_gradcheck on the CUDA
   backend. */
#define TRN_CUDA_FLASH_HS(X) /* no bf16 attention here: its kernels are not compiled (train_cuda.h) */
#define TRAIN_IMPLEMENTATION
#include "train.h"
#include "tests/cuda_on_cpu.h"
#define TRN_USE_CUDA
#define CUSTOM_OP_NO_MAIN
#include "examples/custom_op.c"
#include "tests/check.h"
#include "tests/cuda_fixtures.h" /* maxdiff */

static float run(net *n, const float *x, const float *y, int B, std::vector<float> *pred, std::vector<float> *grads) {
    trn_zero_grad(&n->m);
    trn_reset(&n->m);
    trn_tensor *p = net_forward(n, x, B);
    trn_tensor *loss = trn_mse(&n->m, p, y);
    pred->resize(p->size);
    trn_read(&n->m, p, pred->data());
    trn_backward(&n->m, loss);
    grads->resize(n->m.n_floats);
    n->m.backend->download(grads->data(), n->m.grad_data, n->m.n_floats * sizeof(float));
    return trn_item(&n->m, loss);
}
int main(void) {
    const int D = 4, H = 40, B = 37;
    trn_cuda_set_tf32(0);
    if (trn_cuda_init(0) != TRN_OK) { printf("no device: %s\n", trn_error_reason()); return 1; }
    net cpu, gpu;
    /* the same weights on both: net_create draws from the same seed */
    trn_model_init(&cpu.m, NULL);
    net_create(&gpu, D, H, 5);
    {   /* a CPU twin of gpu: create with the CPU backend by hand */
        trn_rng rng;
        cpu.D = D; cpu.H = H;
        cpu.w1 = trn_param2(&cpu.m, "w1", H, D); cpu.b1 = trn_param1(&cpu.m, "b1", H);
        cpu.beta = trn_param1(&cpu.m, "beta", H); cpu.w2 = trn_param2(&cpu.m, "w2", 1, H);
        cpu.b2 = trn_param1(&cpu.m, "b2", 1);
        CHECK(trn_model_alloc(&cpu.m) == TRN_OK, "alloc\n");
        std::vector<float> w(gpu.m.n_floats);
        gpu.m.backend->download(w.data(), gpu.m.param_data, w.size() * sizeof(float));
        memcpy(cpu.m.param_data, w.data(), w.size() * sizeof(float));
        /* beta away from 1 so that dbeta's formula is exercised fully */
        trn_rng_seed(&rng, 9);
        for (int i = 0; i < H; i++) cpu.beta->data[i] = 0.5f + 2.0f * trn_rng_uniform(&rng);
        trn_write(&gpu.m, gpu.beta, cpu.beta->data);
    }
    std::vector<float> x((size_t)B * D), y((size_t)B), pc, pg, gc, gg;
    trn_rng data;
    trn_rng_seed(&data, 11);
    make_batch(&data, x.data(), y.data(), B, D);
    float lc = run(&cpu, x.data(), y.data(), B, &pc, &gc);
    float lg = run(&gpu, x.data(), y.data(), B, &pg, &gg);
    printf("swish model on cuda vs cpu: output %.3g, loss %.3g, gradients %.3g\n", maxdiff(pg, pc),
           fabs((double)lc - lg), maxdiff(gg, gc));
    CHECK(maxdiff(pg, pc) <= 1e-5, "output: %g\n", maxdiff(pg, pc));
    CHECK(fabs((double)lc - lg) <= 1e-5, "loss %g vs %g\n", lc, lg);
    CHECK(maxdiff(gg, gc) <= 1e-5, "gradients: %g\n", maxdiff(gg, gc));
    CHECK(cuemu::errors() == 0, "harness errors: %ld\n", cuemu::errors());
    check_data cd = {&gpu, x.data(), y.data(), 8};
    trn_gradcheck_result r;
    int bad = trn_gradcheck(&gpu.m, check_model_loss, &cd, NULL, &r);
    printf("gradcheck on the cuda backend: %d elements, worst %.3f of tolerance\n", r.checked, r.worst);
    CHECK(bad == 0 && r.checked > 100, "gradcheck on cuda: %d of %d off\n", bad, r.checked);
    trn_model_free(&cpu.m);
    trn_model_free(&gpu.m);
    trn_cuda_shutdown();
    return check_summary();
}
