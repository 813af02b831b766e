// build: -O1 -g1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined -Wno-maybe-uninitialized
// requires: test -f examples/gpt2.c
/* tests/test_cuda_kv_cache.cpp - generation with a key/value cache on the
   CUDA backend (its kernels run on the CPU by tests/cuda_on_cpu.h):
   examples/gpt2.c's model with the same random weights on both backends, a
   prompt, then 20 greedy tokens with gpt2_forward_cached. At every step the
   CUDA cached logits match the CPU cached logits and the CUDA recomputed
   window (gpt2_forward), within 2e-5 (fp32, TF32 off), and the tokens are
   the same; the cache is counted as device memory of the kind "kv cache". */
#define TRN_CUDA_FLASH_HS(X) /* no bf16 attention here: its kernels are not compiled (train_cuda.h) */
#include "tests/cuda_on_cpu.h"
#define TRN_USE_CUDA
#define TRAIN_CUDA_IMPLEMENTATION
#define GPT2_NO_MAIN
#include "examples/gpt2.c"
#include "tests/check.h"

#include <vector>

static int argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++) if (x[i] > x[b]) b = i;
    return b;
}

int main(void) {
    gpt2_config cfg = {2, 3, 24, 40, 256, 256}; /* L, NH, C, maxT, V, Vp */
    const int n_prompt = 7, n_new = 20, V = 256;
    trn_set_threads(1);
    trn_cuda_set_tf32(0);
    if (trn_cuda_init(0) != TRN_OK) { printf("cuda init: %s\n", trn_error_reason()); return 1; }
    gpt2 gc, gg;
    CHECK(gpt2_create(&gc, &cfg, NULL) == TRN_OK, "gpt2_create cpu: %s\n", trn_error_reason());
    CHECK(gpt2_create(&gg, &cfg, trn_cuda_backend()) == TRN_OK, "gpt2_create cuda: %s\n", trn_error_reason());
    gpt2_init_weights(&gc, 4);
    trn_rng r;
    trn_rng_seed(&r, 6);
    for (int i = 0; i < gc.m.n_params; i++) /* larger weights: attention far from uniform */
        if (gc.m.params[i]->ndim == 2) trn_init_normal(&gc.m, gc.m.params[i], 0.0f, 0.2f, &r);
    trn_cuda_backend()->upload(gg.m.param_data, gc.m.param_data, gc.m.n_floats * sizeof(float));
    trn_kv_cache kc, kg;
    size_t dev0 = trn_ledger_current(TRN_DEVICE, TRN_KIND_KV_CACHE);
    CHECK(trn_kv_cache_init(&kc, &gc.m, 2, 1, 40, 3, 8) == TRN_OK && trn_kv_cache_init(&kg, &gg.m, 2, 1, 40, 3, 8) == TRN_OK,
          "kv init: %s\n", trn_error_reason());
    CHECK(trn_ledger_current(TRN_DEVICE, TRN_KIND_KV_CACHE) - dev0 == 2u * 2 * 40 * 24 * sizeof(float),
          "device kv cache bytes: %zu\n", trn_ledger_current(TRN_DEVICE, TRN_KIND_KV_CACHE) - dev0);
    trn_no_grad(&gc.m);
    trn_no_grad(&gg.m);
    std::vector<int> ctx(64);
    for (int i = 0; i < n_prompt; i++) ctx[(size_t)i] = (int)trn_rng_below(&r, V);
    std::vector<float> lc(V), lg(V), lw(V);
    double d_backends = 0, d_window = 0;
    int same = 1;
    for (int t = n_prompt; t < n_prompt + n_new; t++) {
        const int *ids = t == n_prompt ? ctx.data() : ctx.data() + t - 1;
        int T = t == n_prompt ? t : 1;
        trn_reset(&gc.m);
        trn_read(&gc.m, gpt2_forward_cached(&gc, &kc, ids, 1, T), lc.data());
        trn_reset(&gg.m);
        trn_read(&gg.m, gpt2_forward_cached(&gg, &kg, ids, 1, T), lg.data());
        trn_reset(&gg.m);
        trn_tensor *full = gpt2_forward(&gg, ctx.data(), 1, t);
        trn_cuda_backend()->download(lw.data(), full->data + (size_t)(t - 1) * V, sizeof(float) * V);
        for (int v = 0; v < V; v++) {
            d_backends = fmax(d_backends, fabs((double)lg[(size_t)v] - lc[(size_t)v]));
            d_window = fmax(d_window, fabs((double)lg[(size_t)v] - lw[(size_t)v]));
        }
        if (argmax(lg.data(), V) != argmax(lc.data(), V) || argmax(lg.data(), V) != argmax(lw.data(), V)) same = 0;
        ctx[(size_t)t] = argmax(lw.data(), V);
    }
    printf("cuda cached generation: vs cpu cached %.3g, vs cuda recomputed window %.3g, same tokens %s\n", d_backends,
           d_window, same ? "yes" : "no");
    CHECK(d_backends < 2e-5 && d_window < 2e-5, "cached logits: cuda vs cpu %.3g, vs the window %.3g\n", d_backends,
          d_window);
    CHECK(same, "greedy tokens differ\n");
    CHECK(cuemu::errors() == 0, "harness errors: %ld\n", cuemu::errors());
    trn_kv_cache_free(&kc);
    trn_kv_cache_free(&kg);
    CHECK(trn_ledger_current(TRN_DEVICE, TRN_KIND_KV_CACHE) == dev0, "device kv cache bytes left after free\n");
    gpt2_free(&gc);
    gpt2_free(&gg);
    trn_cuda_shutdown();
    return check_summary();
}
