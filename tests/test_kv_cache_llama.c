// requires: test -f examples/llama.c
/* test_kv_cache_llama.c - examples/llama.c's generation with a key/value
   cache (llama_forward_cached: RoPE at positions kv.len + t, grouped-query
   attention over the cache) gives what recomputing the window gives
   (llama_forward): a prompt, then 24 greedy tokens; at every step the
   cached logits of the new position match the last position of a full
   forward (2e-5 absolute on logits of size ~1) and the tokens are the same.
   Also the sampler of examples/common.h with this model's cache. */
#define LLAMA_NO_MAIN
#include "examples/llama.c"
#include "tests/check.h"

static int argmax(const float *x, int n) {
    int i, b = 0;
    for (i = 1; i < n; i++) if (x[i] > x[b]) b = i;
    return b;
}

int main(void) {
    /* L, NH, NKV, C, hs, F, maxT, V, Vp, theta, eps: 6 query heads on 2 kv heads */
    llama_config cfg = {3, 6, 2, 48, 8, 96, 64, 256, 256, 10000.0f, 1e-5f, 0, {0, 0.0f, 0.0f, 0.0f, 0}};
    llama g;
    trn_kv_cache kv;
    trn_tokenizer tok;
    int ctx[64], n_prompt = 9, n_new = 24, i, t, same = 1;
    float full[256], cached[256];
    double worst = 0.0;
    trn_rng rng;
    trn_set_threads(2);
    CHECK(llama_create(&g, &cfg, NULL) == TRN_OK, "llama_create: %s\n", trn_error_reason());
    llama_init_weights(&g, 3);
    trn_rng_seed(&rng, 8);
    for (i = 0; i < g.m.n_params; i++) /* larger than the init's, so attention is not uniform */
        if (g.m.params[i]->ndim == 2) trn_init_normal(&g.m, g.m.params[i], 0.0f, 0.15f, &rng);
    for (i = 0; i < n_prompt; i++) ctx[i] = (int)trn_rng_below(&rng, 256);
    CHECK(trn_kv_cache_init(&kv, &g.m, cfg.n_layer, 1, cfg.block_size, cfg.n_kv_head, cfg.head_dim) == TRN_OK,
          "kv init: %s\n", trn_error_reason());
    trn_no_grad(&g.m);
    for (t = n_prompt; t < n_prompt + n_new; t++) {
        trn_tensor *lg;
        double d = 0.0;
        int v;
        trn_reset(&g.m);
        lg = llama_forward(&g, ctx, 1, t);
        memcpy(full, lg->data + (size_t)(t - 1) * 256, sizeof full);
        trn_reset(&g.m);
        lg = llama_forward_cached(&g, &kv, t == n_prompt ? ctx : ctx + t - 1, 1, t == n_prompt ? t : 1);
        memcpy(cached, lg->data, sizeof cached);
        for (v = 0; v < 256; v++) d = check_worse(d, fabs((double)full[v] - cached[v]));
        worst = check_worse(worst, d);
        if (argmax(full, 256) != argmax(cached, 256)) same = 0;
        ctx[t] = argmax(full, 256);
    }
    CHECK(kv.len == n_prompt + n_new - 1, "cache length %d\n", kv.len);
    CHECK(worst < 2e-5, "cached logits differ from the recomputed window by %.3g\n", worst);
    CHECK(same, "greedy tokens differ between cached and recomputed generation\n");
    printf("ok - llama (6 heads, 2 kv heads, RoPE): prompt %d + %d greedy tokens, cached vs recomputed max|diff| %.3g\n",
           n_prompt, n_new, worst);
    /* the sampler past the window: 3 + 30 tokens through 16 positions */
    trn_tokenizer_init_bytes(&tok);
    trn_kv_cache_free(&kv);
    CHECK(trn_kv_cache_init(&kv, &g.m, cfg.n_layer, 1, 16, cfg.n_kv_head, cfg.head_dim) == TRN_OK, "kv init\n");
    printf("sample: ");
    sample_text(&g.m, llama_logits, &g, 256, 256, &tok, ctx, 3, 30, 16, 1.0f, 0, &rng, llama_logits_cached, &kv);
    printf("\n");
    CHECK(kv.len > 0 && kv.len <= 16, "cache length %d after sampling past the window\n", kv.len);
    trn_tokenizer_free(&tok);
    trn_kv_cache_free(&kv);
    llama_free(&g);
    return check_summary();
}
