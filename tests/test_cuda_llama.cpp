// build: -O1 -g1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined -Wno-maybe-uninitialized
// requires: test -f examples/llama.c
/* tests/test_cuda_llama.cpp - 10 training steps of examples/llama.c's model
   (its own llama_create, llama_init_weights, llama_loss: RMSNorm, RoPE,
   grouped-query attention, SwiGLU) on the CPU backend and on the CUDA
   backend, the CUDA kernels run on the CPU by tests/cuda_on_cpu.h (under
   AddressSanitizer), as tests/test_cuda_gpt2.cpp does for GPT-2; with an
   untied head and with a tied one (the head is the embedding tensor).

   Tolerance, fp32 (TF32 off): the loss of every step within 1e-4, the
   gradient norm within 1e-4 relative, the weights after 10 AdamW steps
   within 1e-3 of the distance they moved. */
#define TRN_CUDA_FLASH_HS(X) /* no bf16 attention here: its kernels are not compiled (train_cuda.h) */
#include "tests/cuda_on_cpu.h"
#define TRN_USE_CUDA
#define TRAIN_CUDA_IMPLEMENTATION
#define LLAMA_NO_MAIN
#include "examples/llama.c"
#include "tests/check.h"

#include <vector>

static void compare(llama_config cfg, const char *what) {
    const int B = 3, T = 29, steps = 10;
    const float lr = 3e-3f;
    llama gc, gg;
    CHECK(llama_create(&gc, &cfg, NULL) == TRN_OK, "llama_create cpu: %s\n", trn_error_reason());
    CHECK(llama_create(&gg, &cfg, trn_cuda_backend()) == TRN_OK, "llama_create cuda: %s\n", trn_error_reason());
    llama_init_weights(&gc, 42);
    llama_init_weights(&gg, 42);
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
    const char *text = "the kit trains a llama on the cpu and on cuda with the same code. ";
    int len = (int)strlen(text);
    std::vector<int> x((size_t)B * T), y((size_t)B * T);
    trn_rng r;
    trn_rng_seed(&r, 1);
    double worst_loss = 0, worst_norm = 0;
    float first = 0, last = 0;
    printf("examples/llama.c 'tiny' (L=%d NH=%d NKV=%d C=%d F=%d), %s, B=%d T=%d, %zu parameters\n", cfg.n_layer,
           cfg.n_head, cfg.n_kv_head, cfg.n_embd, cfg.ffn_hidden, what, B, T, n);
    for (int s = 0; s < steps; s++) {
        for (int b = 0; b < B; b++) {
            int o = (int)trn_rng_below(&r, (uint32_t)len);
            for (int t = 0; t < T; t++) {
                x[(size_t)(b * T + t)] = (unsigned char)text[(o + t) % len];
                y[(size_t)(b * T + t)] = (unsigned char)text[(o + t + 1) % len];
            }
        }
        float loss[2], norm[2];
        llama *gs[2] = {&gc, &gg};
        trn_adamw *os[2] = {&oc, &og};
        for (int k = 0; k < 2; k++) {
            trn_model *m = &gs[k]->m;
            trn_zero_grad(m);
            trn_reset(m);
            trn_tensor *l = llama_loss(gs[k], x.data(), y.data(), B, T);
            loss[k] = trn_item(m, l);
            trn_backward(m, l);
            norm[k] = trn_clip_grad_norm(m, 1.0f);
            CHECK(trn_adamw_step(os[k], m, lr) == TRN_OK, "adamw: %s\n", trn_error_reason());
        }
        if (s == 0) first = loss[0];
        last = loss[0];
        worst_loss = fmax(worst_loss, fabs((double)loss[0] - loss[1]));
        worst_norm = fmax(worst_norm, fabs((double)norm[0] - norm[1]) / norm[0]);
        printf("  step %2d  loss cpu %.6f cuda %.6f   grad norm cpu %.5f cuda %.5f\n", s, loss[0], loss[1], norm[0],
               norm[1]);
    }
    trn_cpu_backend()->download(wc.data(), gc.m.param_data, n * 4);
    trn_cuda_backend()->download(wg.data(), gg.m.param_data, n * 4);
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        num += ((double)wg[i] - wc[i]) * ((double)wg[i] - wc[i]);
        den += ((double)wc[i] - w0[i]) * ((double)wc[i] - w0[i]);
    }
    printf("after %d steps: max|loss diff| %.3g, max rel grad-norm diff %.3g, weights rel %.3g\n", steps, worst_loss,
           worst_norm, sqrt(num / den));
    CHECK(worst_loss <= 1e-4, "%s: loss differs by %.3g\n", what, worst_loss);
    CHECK(worst_norm <= 1e-4, "%s: grad norm differs by %.3g (relative)\n", what, worst_norm);
    CHECK(sqrt(num / den) <= 1e-3, "%s: weights differ by %.3g of their movement\n", what, sqrt(num / den));
    CHECK(last < first - 0.3f, "%s: llama did not learn: %.3f -> %.3f\n", what, first, last);
    CHECK(cuemu::errors() == 0, "%s: the harness reported %ld errors\n", what, cuemu::errors());
    trn_adamw_free(&oc);
    trn_adamw_free(&og);
    llama_free(&gc);
    llama_free(&gg);
}

int main(void) {
    const preset *p = find_preset("tiny");
    CHECK(p != NULL, "examples/llama.c has no 'tiny' preset\n");
    if (!p) return check_summary();
    trn_set_threads(1);
    trn_cuda_set_tf32(0);
    if (trn_cuda_init(0) != TRN_OK) { printf("cuda init: %s\n", trn_error_reason()); return 1; }
    llama_config cfg = p->cfg;
    compare(cfg, "untied head");
    cfg.tied = 1; // the head is the embedding tensor: one gradient from two uses
    compare(cfg, "tied head");
    trn_cuda_shutdown();
    return check_summary();
}
