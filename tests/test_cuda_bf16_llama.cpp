// build: -O1 -g1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined -Wno-maybe-uninitialized
// requires: test -f examples/llama.c
/* tests/test_cuda_bf16_llama.cpp - examples/llama.c's model (RMSNorm,
   RoPE, grouped-query attention, SwiGLU, untied head) in bf16 on the CUDA
   backend (run on the CPU by tests/cuda_on_cpu.h, under ASan) against the
   CPU backend in fp32, from the same weights on the same batches:
     1. 30 AdamW steps: every step's loss within 3% of fp32's (the two
        trajectories part slowly: bf16 rounds every activation), and bf16
        learns (every other step's backward starts from 0.5, as gradient
        accumulation's trn_backward_scaled does);
     2. generation with the key/value cache in bf16 (2-byte cache rows,
        the last position copied out in the tensor's dtype): the logits of
        a cached prefill + one-token step equal, to bf16 precision, those
        of the full forward over the same tokens;
     3. the fused classifier (trn_linear_cross_entropy) in its chunked way:
        x (300,16) (a parameter, so a cast puts it in an activation slot),
        W (64,16), b (64), chunks of 20 rows, backward from 0.5: the saved
        bf16 dx is scaled into x's gradient, dW and db stay fp32; loss and
        the three gradients match fp32 to bf16 precision. */
#define TRN_CUDA_FLASH_HS(X) X(16) /* bf16 attention compiled for the tiny preset's head size only (train_cuda.h) */
#include "tests/cuda_on_cpu.h"
/* the fused classifier in chunks of 20 rows of 64 logits (part 3) */
#define TRN__XENT_CHUNK_FLOATS (20 * 64)
#define TRN_USE_CUDA
#define TRAIN_CUDA_IMPLEMENTATION
#define LLAMA_NO_MAIN
#include "examples/llama.c"
#include "tests/check.h"

#include <vector>

int main(void) {
    const preset *p = find_preset("tiny");
    CHECK(p != NULL, "examples/llama.c has no 'tiny' preset\n");
    if (!p) return check_summary();
    llama_config cfg = p->cfg;
    const int B = 3, T = 29, steps = 30;
    const float lr = 3e-3f;
    trn_set_threads(1);
    if (trn_cuda_init(0) != TRN_OK) { printf("cuda init: %s\n", trn_error_reason()); return 1; }
    CHECK(trn_cuda_set_precision(TRN_CUDA_BF16) == TRN_OK, "bf16: %s\n", trn_error_reason());
    llama gc, gg;
    CHECK(llama_create(&gc, &cfg, NULL) == TRN_OK, "llama_create cpu: %s\n", trn_error_reason());
    CHECK(llama_create(&gg, &cfg, trn_cuda_backend()) == TRN_OK, "llama_create cuda: %s\n", trn_error_reason());
    CHECK(gg.m.act_dtype == TRN_BF16 && gc.m.act_dtype == TRN_F32, "dtypes: cuda %d cpu %d\n", gg.m.act_dtype,
          gc.m.act_dtype);
    llama_init_weights(&gc, 42);
    llama_init_weights(&gg, 42);
    trn_adamw_desc d;
    memset(&d, 0, sizeof d);
    d.lr = lr;
    d.weight_decay = 0.1f;
    trn_adamw oc, og;
    trn_adamw_init(&oc, &d);
    trn_adamw_init(&og, &d);
    const char *text = "the kit trains a llama in bf16 on cuda and in fp32 on the cpu with the same code. ";
    int len = (int)strlen(text);
    std::vector<int> x((size_t)B * T), y((size_t)B * T);
    trn_rng r;
    trn_rng_seed(&r, 1);
    double worst = 0;
    float first = 0, last = 0;
    for (int s = 0; s < steps; s++) {
        for (int b = 0; b < B; b++) {
            int o = (int)trn_rng_below(&r, (uint32_t)len);
            for (int t = 0; t < T; t++) {
                x[(size_t)(b * T + t)] = (unsigned char)text[(o + t) % len];
                y[(size_t)(b * T + t)] = (unsigned char)text[(o + t + 1) % len];
            }
        }
        float loss[2];
        llama *gs[2] = {&gc, &gg};
        trn_adamw *os[2] = {&oc, &og};
        for (int k = 0; k < 2; k++) {
            trn_model *m = &gs[k]->m;
            trn_zero_grad(m);
            trn_reset(m);
            trn_tensor *l = llama_loss(gs[k], x.data(), y.data(), B, T);
            loss[k] = trn_item(m, l);
            trn_backward_scaled(m, l, s % 2 ? 0.5f : 1.0f);
            trn_clip_grad_norm(m, 1.0f);
            CHECK(trn_adamw_step(os[k], m, lr) == TRN_OK, "adamw: %s\n", trn_error_reason());
        }
        if (s == 0) first = loss[1];
        last = loss[1];
        worst = fmax(worst, fabs((double)loss[1] - loss[0]) / loss[0]);
        if (s % 5 == 0 || s == steps - 1)
            printf("  step %2d  loss fp32 (cpu) %.5f  bf16 (cuda) %.5f\n", s, loss[0], loss[1]);
    }
    printf("worst step: bf16 %.2f%% from fp32\n", 100 * worst);
    CHECK(worst <= 0.03, "a bf16 step's loss is %.2f%% from fp32's\n", 100 * worst);
    CHECK(last < first - 0.5f, "bf16 llama did not learn: %.3f -> %.3f\n", first, last);

    /* 2: cached generation vs the full forward, both bf16 */
    const int P = 11, V = cfg.padded_vocab;
    std::vector<int> ids(P + 1);
    for (int i = 0; i <= P; i++) ids[(size_t)i] = (unsigned char)text[i];
    trn_no_grad(&gg.m);
    trn_reset(&gg.m);
    trn_tensor *full = llama_forward(&gg, ids.data(), 1, P + 1);
    std::vector<float> lf(V), lc(V);
    trn_read_range(&gg.m, full, (size_t)P * V, lf.data(), (size_t)V); /* the last position's logits */
    trn_kv_cache kv;
    CHECK(trn_kv_cache_init(&kv, &gg.m, cfg.n_layer, 1, 32, cfg.n_kv_head, cfg.head_dim) == TRN_OK,
          "kv cache: %s\n", trn_error_reason());
    CHECK(kv.dtype == TRN_BF16, "the cache is %s\n", trn_dtype_name(kv.dtype));
    trn_reset(&gg.m);
    llama_forward_cached(&gg, &kv, ids.data(), 1, P); /* prefill */
    trn_reset(&gg.m);
    trn_tensor *step = llama_forward_cached(&gg, &kv, ids.data() + P, 1, 1);
    trn_read(&gg.m, step, lc.data());
    double mx = 0, dmax = 0;
    for (int v = 0; v < V; v++) {
        mx = fmax(mx, fabs(lf[(size_t)v]));
        dmax = fmax(dmax, fabs((double)lf[(size_t)v] - lc[(size_t)v]));
    }
    printf("cached vs full forward, last position: max|logit| %.4f, max|diff| %.4f\n", mx, dmax);
    CHECK(dmax <= 0.03 * mx && mx > 0, "cached bf16 logits differ by %.3g (max |logit| %.3g)\n", dmax, mx);
    trn_kv_cache_free(&kv);

    /* 3 */
    {
        const int N = 300, C = 16, Vp = 64, Vn = 60;
        trn_model mc, mg;
        trn_tensor *X[2], *W[2], *Bb[2];
        trn_model *ms[2] = {&mc, &mg};
        std::vector<int> tg(N);
        for (int i = 0; i < N; i++) tg[(size_t)i] = (i * 37 + 5) % Vn;
        float loss[2];
        std::vector<float> g[2][3];
        for (int k = 0; k < 2; k++) {
            trn_model *m = ms[k];
            trn_model_init(m, k ? trn_cuda_backend() : NULL);
            X[k] = trn_param2(m, "x", N, C);
            W[k] = trn_param2(m, "w", Vp, C);
            Bb[k] = trn_param1(m, "b", Vp);
            CHECK(trn_model_alloc(m) == TRN_OK, "alloc: %s\n", trn_error_reason());
            trn_rng rr;
            trn_rng_seed(&rr, 5);
            trn_init_normal(m, X[k], 0.0f, 1.0f, &rr);
            trn_init_normal(m, W[k], 0.0f, 0.5f, &rr);
            trn_init_normal(m, Bb[k], 0.0f, 0.1f, &rr);
            trn_zero_grad(m);
            trn_reset(m);
            trn_tensor *l = trn_linear_cross_entropy(m, X[k], W[k], Bb[k], tg.data(), Vn);
            loss[k] = trn_item(m, l);
            trn_backward_scaled(m, l, 0.5f);
            trn_tensor *ts[3] = {X[k], W[k], Bb[k]};
            for (int j = 0; j < 3; j++) {
                g[k][j].resize(ts[j]->size);
                trn_read_grad(m, ts[j], g[k][j].data());
            }
        }
        printf("classifier in chunks: loss fp32 %.6f bf16 %.6f\n", loss[0], loss[1]);
        CHECK(fabs(loss[1] - loss[0]) <= 0.01 * loss[0], "classifier loss fp32 %.6f bf16 %.6f\n", loss[0], loss[1]);
        const char *names[3] = {"dx", "dW", "db"};
        for (int j = 0; j < 3; j++) {
            double mx = 0, d = 0;
            for (size_t i = 0; i < g[0][j].size(); i++) {
                mx = fmax(mx, fabs(g[0][j][i]));
                d = fmax(d, fabs((double)g[0][j][i] - g[1][j][i]));
            }
            printf("  %s: max|fp32| %.4g, max|bf16 - fp32| %.4g (%.2f%%)\n", names[j], mx, d, 100 * d / mx);
            CHECK(mx > 0 && d <= 0.03 * mx, "classifier %s differs by %.3g (max %.3g)\n", names[j], d, mx);
        }
        trn_model_free(&mc);
        trn_model_free(&mg);
    }
    CHECK(cuemu::errors() == 0, "the harness reported %ld errors\n", cuemu::errors());
    trn_adamw_free(&oc);
    trn_adamw_free(&og);
    llama_free(&gc);
    llama_free(&gg);
    trn_cuda_shutdown();
    return check_summary();
}
