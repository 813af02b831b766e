// build: -pthread
// requires: test -f examples/gpt2.c
/* test_kv_cache.c - generation with a key/value cache gives what
   recomputing the window gives.

   1. examples/gpt2.c's model (its own code: gpt2_forward and
      gpt2_forward_cached), random weights: a prompt, then 24 greedy
      tokens; at every step the cached logits (one new position) match the
      logits of the last position of a full forward over the whole context
      (tolerance 2e-5 absolute on logits of size ~1), and the greedy tokens
      are the same. The prefill of the prompt alone is checked the same way.
   2. trn_attention_cached with grouped-query heads (n_kv_head < n_head)
      against trn_attention on the same q and keys/values repeated per
      head: prefilled at once, and fed one position at a time.
   3. the ledger: the cache is its own kind, "kv cache", 2*L*B*maxT*Ckv
      floats, back to 0 after trn_kv_cache_free.
   4. the examples' sampler (examples/common.h) goes on past the cache's
      window (it restarts the cache from the last half of the window).
   examples/llama.c's cached forward (RoPE at the cache's positions,
   grouped-query heads) is checked the same way by tests/test_kv_cache_llama. */
#define GPT2_NO_MAIN
#include "examples/gpt2.c"
#include "tests/check.h"

static int argmax(const float *x, int n) {
    int i, b = 0;
    for (i = 1; i < n; i++) if (x[i] > x[b]) b = i;
    return b;
}

static void test_gpt2_cached(void) {
    gpt2_config cfg = {3, 4, 48, 64, 256, 256}; /* L, NH, C, maxT, V, Vp */
    gpt2 g;
    trn_kv_cache kv;
    int ctx[64], n_prompt = 11, n_new = 24, i, t, same = 1;
    float full[256], cached[256];
    double worst = 0.0;
    trn_rng rng;
    CHECK(gpt2_create(&g, &cfg, NULL) == TRN_OK, "gpt2_create: %s\n", trn_error_reason());
    gpt2_init_weights(&g, 7);
    trn_rng_seed(&rng, 3);
    /* larger weights than GPT-2's 0.02, so attention is not uniform */
    for (i = 0; i < g.m.n_params; i++)
        if (g.m.params[i]->ndim == 2) trn_init_normal(&g.m, g.m.params[i], 0.0f, 0.15f, &rng);
    for (i = 0; i < n_prompt; i++) ctx[i] = (int)trn_rng_below(&rng, 256);
    CHECK(trn_kv_cache_init(&kv, &g.m, cfg.n_layer, 1, cfg.block_size, cfg.n_head, cfg.n_embd / cfg.n_head) == TRN_OK,
          "kv init: %s\n", trn_error_reason());
    trn_no_grad(&g.m);
    for (t = n_prompt; t < n_prompt + n_new; t++) {
        trn_tensor *lg;
        double d = 0.0;
        int v, a, b;
        trn_reset(&g.m);
        lg = gpt2_forward(&g, ctx, 1, t);                    /* the window, recomputed */
        memcpy(full, lg->data + (size_t)(t - 1) * 256, sizeof full);
        trn_reset(&g.m);
        lg = gpt2_forward_cached(&g, &kv, t == n_prompt ? ctx : ctx + t - 1, 1, t == n_prompt ? t : 1);
        memcpy(cached, lg->data, sizeof cached);
        CHECK(kv.len == t, "cache length %d after %d tokens\n", kv.len, t);
        for (v = 0; v < 256; v++) d = check_worse(d, fabs((double)full[v] - cached[v]));
        worst = check_worse(worst, d);
        a = argmax(full, 256); b = argmax(cached, 256);
        if (a != b) same = 0;
        ctx[t] = a;
    }
    CHECK(worst < 2e-5, "cached logits differ from the recomputed window by %.3g\n", worst);
    CHECK(same, "greedy tokens differ between cached and recomputed generation\n");
    printf("ok - gpt2: prompt %d + %d greedy tokens, cached vs recomputed logits max|diff| %.3g, same tokens\n", n_prompt,
           n_new, worst);
    trn_kv_cache_free(&kv);
    gpt2_free(&g);
}

/* q (1,T,NH*hs), k, v (1,T,NKV*hs) -> reference through trn_attention on
   qkv (1,T,3C) with each kv head repeated for its query heads */
static void test_gqa(void) {
    enum { T = 9, NH = 6, NKV = 2, HS = 5, C = NH * HS, CKV = NKV * HS };
    trn_model m;
    trn_kv_cache kv;
    float q[T * C], k[T * CKV], v[T * CKV], qkv[T * 3 * C], ref[T * C], got[T * C];
    int sq[3] = {1, T, C}, sk[3] = {1, T, CKV}, s3[3] = {1, T, 3 * C}, s1q[3] = {1, 1, C}, s1k[3] = {1, 1, CKV};
    int t, h, j;
    double d1 = 0, d2 = 0;
    size_t before = trn_ledger_current(TRN_HOST, TRN_KIND_KV_CACHE);
    trn_rng rng;
    trn_rng_seed(&rng, 9);
    for (j = 0; j < T * C; j++) q[j] = trn_rng_normal(&rng);
    for (j = 0; j < T * CKV; j++) { k[j] = trn_rng_normal(&rng); v[j] = trn_rng_normal(&rng); }
    for (t = 0; t < T; t++)
        for (h = 0; h < NH; h++) {
            int g = h / (NH / NKV);
            memcpy(qkv + t * 3 * C + h * HS, q + t * C + h * HS, sizeof(float) * HS);
            memcpy(qkv + t * 3 * C + C + h * HS, k + t * CKV + g * HS, sizeof(float) * HS);
            memcpy(qkv + t * 3 * C + 2 * C + h * HS, v + t * CKV + g * HS, sizeof(float) * HS);
        }
    trn_model_init(&m, NULL);
    trn_param1(&m, "unused", 1);
    trn_model_alloc(&m);
    trn_no_grad(&m);
    trn_reset(&m);
    memcpy(ref, trn_attention(&m, trn_input(&m, "qkv", 3, s3, qkv), NH, 1)->data, sizeof ref);
    CHECK(trn_kv_cache_init(&kv, &m, 2, 1, 16, NKV, HS) == TRN_OK, "kv init\n");
    CHECK(trn_ledger_current(TRN_HOST, TRN_KIND_KV_CACHE) - before == 2u * 2 * 16 * CKV * sizeof(float),
          "the ledger's kv cache line: %zu bytes\n", trn_ledger_current(TRN_HOST, TRN_KIND_KV_CACHE) - before);
    CHECK(strcmp(trn_kind_name(TRN_KIND_KV_CACHE), "kv cache") == 0, "kind name '%s'\n", trn_kind_name(TRN_KIND_KV_CACHE));
    /* all T at once, into layer 1 */
    trn_reset(&m);
    memcpy(got, trn_attention_cached(&m, &kv, 1, trn_input(&m, "q", 3, sq, q), trn_input(&m, "k", 3, sk, k),
                                     trn_input(&m, "v", 3, sk, v), NH)->data, sizeof got);
    for (j = 0; j < T * C; j++) d1 = check_worse(d1, fabs((double)got[j] - ref[j]));
    /* one position at a time, into layer 0 */
    for (t = 0; t < T; t++) {
        trn_reset(&m);
        memcpy(got + t * C, trn_attention_cached(&m, &kv, 0, trn_input(&m, "q", 3, s1q, q + t * C),
                                                 trn_input(&m, "k", 3, s1k, k + t * CKV),
                                                 trn_input(&m, "v", 3, s1k, v + t * CKV), NH)->data, sizeof(float) * C);
        trn_kv_cache_advance(&kv, 1);
    }
    for (j = 0; j < T * C; j++) d2 = check_worse(d2, fabs((double)got[j] - ref[j]));
    CHECK(d1 < 1e-5 && d2 < 1e-5, "grouped-query cached attention: prefill %.3g, step by step %.3g\n", d1, d2);
    CHECK(memcmp(kv.k, k, sizeof k) == 0 && memcmp(kv.v + (size_t)16 * CKV, v, sizeof v) == 0,
          "the cache does not hold the keys and values\n");
    printf("ok - grouped-query attention over the cache (6 heads, 2 kv heads): prefill %.2g, one by one %.2g\n", d1, d2);
    trn_kv_cache_free(&kv);
    CHECK(trn_ledger_current(TRN_HOST, TRN_KIND_KV_CACHE) == before, "kv cache bytes left after free\n");
    CHECK(trn_kv_cache_init(&kv, &m, 1, 1, 0, 1, 1) == TRN_ERR_INVALID, "max_T 0 accepted\n");
    trn_model_free(&m);
}

/* the sampler goes on past the window: 3 + 40 tokens through a cache of 16 */
static void test_sampler_window(void) {
    gpt2_config cfg = {2, 2, 32, 64, 256, 256};
    gpt2 g;
    trn_kv_cache kv;
    trn_tokenizer tok;
    trn_rng r;
    int prompt[3] = {'a', 'b', 'c'};
    CHECK(gpt2_create(&g, &cfg, NULL) == TRN_OK, "create\n");
    gpt2_init_weights(&g, 5);
    trn_tokenizer_init_bytes(&tok);
    CHECK(trn_kv_cache_init(&kv, &g.m, 2, 1, 16, 2, 16) == TRN_OK, "kv init\n");
    trn_rng_seed(&r, 1);
    printf("sample: ");
    sample_text(&g.m, gpt2_logits, &g, 256, 256, &tok, prompt, 3, 40, 16, 1.0f, 0, &r, gpt2_logits_cached, &kv);
    printf("\n");
    /* the prompt fills 3, each token one more; a full cache restarts with
       8 when tokens 17, 26 and 35 are drawn, and then holds 8 + 7 = 15 */
    CHECK(kv.len == 15, "cache length %d after 43 tokens through a window of 16 (want 15)\n", kv.len);
    printf("ok - the sampler runs past the window; the cache holds %d of 16 positions at the end\n", kv.len);
    trn_kv_cache_free(&kv);
    trn_tokenizer_free(&tok);
    gpt2_free(&g);
}

int main(void) {
    trn_set_threads(2);
    test_gpt2_cached();
    test_gqa();
    test_sampler_window();
    return check_summary();
}
