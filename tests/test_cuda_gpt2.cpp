// build: -O1 -g1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined -Wno-maybe-uninitialized
// requires: test -f examples/gpt2.c
/* tests/test_cuda_gpt2.cpp - 10 training steps of examples/gpt2.c's model
   (its own code: gpt2_create, gpt2_init_weights, gpt2_loss) on the CPU
   backend and on the CUDA backend, the CUDA kernels run on the CPU by
   tests/cuda_on_cpu.h (under AddressSanitizer, see the build line).

   Stated tolerance, fp32 (TF32 off): the loss of every step within 1e-4,
   the gradient norm within 1e-4 relative, and the weights after 10 AdamW
   steps within 1e-3 of the distance they moved (||w_cuda - w_cpu|| /
   ||w_cpu - w_0||). */
#define TRN_CUDA_FLASH_HS(X) /* no bf16 attention here: its kernels are not compiled (train_cuda.h) */
#include "tests/cuda_on_cpu.h"
/* the fused classifier in chunks of 7 rows (Vp = 256), so that its chunked
   way (saved dx and dW) runs on both backends */
#define TRN__XENT_CHUNK_FLOATS (7 * 256)
#define TRN_USE_CUDA
#define TRAIN_CUDA_IMPLEMENTATION
#define GPT2_NO_MAIN
#include "examples/gpt2.c"
#include "tests/check.h"

#include <vector>

int main(void) {
    const preset *p = find_preset("tiny");
    CHECK(p != NULL, "examples/gpt2.c has no 'tiny' preset\n");
    if (!p) return check_summary();
    gpt2_config cfg = p->cfg;
    const int B = 3, T = 29, steps = 10; /* T not a multiple of 32 */
    const float lr = 3e-3f;
    trn_set_threads(1);
    trn_cuda_set_tf32(0);
    if (trn_cuda_init(0) != TRN_OK) { printf("cuda init: %s\n", trn_error_reason()); return 1; }
    gpt2 gc, gg;
    CHECK(gpt2_create(&gc, &cfg, NULL) == TRN_OK, "gpt2_create cpu: %s\n", trn_error_reason());
    CHECK(gpt2_create(&gg, &cfg, trn_cuda_backend()) == TRN_OK, "gpt2_create cuda: %s\n", trn_error_reason());
    gpt2_init_weights(&gc, 42);
    gpt2_init_weights(&gg, 42);
    size_t n = gc.m.n_floats;
    std::vector<float> w0(n), wc(n), wg(n);
    trn_cpu_backend()->download(w0.data(), gc.m.param_data, n * 4);
    trn_cuda_backend()->download(wg.data(), gg.m.param_data, n * 4);
    CHECK(memcmp(w0.data(), wg.data(), n * 4) == 0, "the two models start from different weights\n");

    trn_adamw_desc d;
    memset(&d, 0, sizeof d);
    d.lr = lr;
    d.weight_decay = 0.1f;
    trn_adamw oc, og;
    trn_adamw_init(&oc, &d);
    trn_adamw_init(&og, &d);
    /* bytes of a short repeating text: there is something to learn */
    const char *text = "the kit trains on the cpu and on cuda with the same code. ";
    int len = (int)strlen(text);
    std::vector<int> x((size_t)B * T), y((size_t)B * T);
    trn_rng r;
    trn_rng_seed(&r, 1);
    double worst_loss = 0, worst_norm = 0;
    float first = 0, last = 0;
    printf("examples/gpt2.c 'tiny' (L=%d NH=%d C=%d V=%d), B=%d T=%d, %zu parameters\n", cfg.n_layer, cfg.n_head,
           cfg.n_embd, cfg.vocab_size, B, T, n);
    for (int s = 0; s < steps; s++) {
        for (int b = 0; b < B; b++) {
            int o = (int)trn_rng_below(&r, (uint32_t)len);
            for (int t = 0; t < T; t++) {
                x[(size_t)(b * T + t)] = (unsigned char)text[(o + t) % len];
                y[(size_t)(b * T + t)] = (unsigned char)text[(o + t + 1) % len];
            }
        }
        float loss[2], norm[2];
        gpt2 *gs[2] = {&gc, &gg};
        trn_adamw *os[2] = {&oc, &og};
        for (int k = 0; k < 2; k++) {
            trn_model *m = &gs[k]->m;
            trn_zero_grad(m);
            trn_reset(m);
            trn_tensor *l = gpt2_loss(gs[k], x.data(), y.data(), B, T);
            loss[k] = trn_item(m, l);
            trn_backward(m, l);
            norm[k] = trn_clip_grad_norm(m, 1.0f);
            CHECK(trn_adamw_step(os[k], m, lr) == TRN_OK, "adamw: %s\n", trn_error_reason());
        }
        if (s == 0) first = loss[0];
        last = loss[0];
        worst_loss = fmax(worst_loss, fabs((double)loss[0] - loss[1]));
        worst_norm = fmax(worst_norm, fabs((double)norm[0] - norm[1]) / norm[0]);
        printf("  step %2d  loss cpu %.6f cuda %.6f |diff| %.2g   grad norm cpu %.5f cuda %.5f\n", s, loss[0], loss[1],
               fabs((double)loss[0] - loss[1]), norm[0], norm[1]);
    }
    trn_cpu_backend()->download(wc.data(), gc.m.param_data, n * 4);
    trn_cuda_backend()->download(wg.data(), gg.m.param_data, n * 4);
    double num = 0, den = 0, mx = 0;
    for (size_t i = 0; i < n; i++) {
        num += ((double)wg[i] - wc[i]) * ((double)wg[i] - wc[i]);
        den += ((double)wc[i] - w0[i]) * ((double)wc[i] - w0[i]);
        mx = fmax(mx, fabs((double)wg[i] - wc[i]));
    }
    printf("after %d steps: max|loss diff| %.3g, max rel grad-norm diff %.3g, weights: rel %.3g, max|diff| %.3g\n",
           steps, worst_loss, worst_norm, sqrt(num / den), mx);
    CHECK(worst_loss <= 1e-4, "loss differs by %.3g\n", worst_loss);
    CHECK(worst_norm <= 1e-4, "grad norm differs by %.3g (relative)\n", worst_norm);
    CHECK(sqrt(num / den) <= 1e-3, "weights differ by %.3g of their movement\n", sqrt(num / den));
    CHECK(mx <= 2 * lr, "a weight differs by %.3g (more than 2 lr)\n", mx);
    CHECK(last < first - 0.3f, "gpt2 did not learn: %.3f -> %.3f\n", first, last);
    CHECK(cuemu::errors() == 0, "the harness reported %ld errors\n", cuemu::errors());
    trn_adamw_free(&oc);
    trn_adamw_free(&og);
    gpt2_free(&gc);
    gpt2_free(&gg);
    trn_cuda_shutdown();
    return check_summary();
}
