// gpt2_generate - how much does the key/value cache save when generating?
//
// GPT-2 (examples/gpt2.c's model, 124M by default, random weights: the
// cost does not depend on the values), a prompt of --prompt tokens, then
// greedy tokens two ways, alternated rep by rep so both see the same
// machine load:
//   - without a cache: every new token runs the model over the whole
//     context (prompt + tokens so far), as a sampler without a cache must;
//   - with the cache (train.h's >>kvcache, gpt2_forward_cached): the prompt
//     once (prefill), then one position per token.
// It prints the median time of each part and tokens/s: decode alone (the
// steady state) and end to end (prefill included), and the ratios, with the
// CPU's name. Both ways must produce the same tokens (it checks).
//
//   bench/gpt2_generate                         124M, prompt 512, 2 threads
//   bench/gpt2_generate --model mini --prompt 100 --tokens 32 --reps 5
//
// Timings are wall clock: run it on a quiet machine.
// build: -pthread
#define GPT2_NO_MAIN
#include "examples/gpt2.c"

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}
static int argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++) if (x[i] > x[b]) b = i;
    return b;
}
static void cpu_name(char *out, size_t cap) {
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[512];
    snprintf(out, cap, "unknown CPU");
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "model name", 10) && strchr(line, ':')) {
            snprintf(out, cap, "%s", strchr(line, ':') + 2);
            out[strcspn(out, "\n")] = 0;
            break;
        }
    if (f) fclose(f);
}

int main(int argc, char **argv) {
    const char *model = "gpt2";
    int n_prompt = 512, n_tok = 16, reps = 3, threads = 2;
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(f, "--help")) {
            printf("usage: gpt2_generate [--model NAME] [--prompt N] [--tokens N] [--reps N] [--threads N]\n");
            return 0;
        }
        if (!v) die("%s needs a value (try --help)", f);
        if (!strcmp(f, "--model")) model = v;
        else if (!strcmp(f, "--prompt")) n_prompt = (int)parse_int(f, v, 1, 1 << 20);
        else if (!strcmp(f, "--tokens")) n_tok = (int)parse_int(f, v, 1, 1 << 20);
        else if (!strcmp(f, "--reps")) reps = (int)parse_int(f, v, 1, 1000);
        else if (!strcmp(f, "--threads")) threads = (int)parse_int(f, v, 1, 1024);
        else die("unknown flag %s (try --help)", f);
        i++;
    }
    const preset *p = find_preset(model);
    if (!p) die("--model %s: no such preset", model);
    gpt2_config cfg = p->cfg;
    if (n_prompt + n_tok > cfg.block_size)
        die("--prompt %d + --tokens %d exceed the model's context of %d", n_prompt, n_tok, cfg.block_size);
    trn_set_threads(threads);
    gpt2 g;
    if (gpt2_create(&g, &cfg, NULL) != TRN_OK) die("gpt2_create: %s", trn_error_reason());
    gpt2_init_weights(&g, 1);
    trn_no_grad(&g.m);
    trn_kv_cache kv;
    if (trn_kv_cache_init(&kv, &g.m, cfg.n_layer, 1, n_prompt + n_tok, cfg.n_head, cfg.n_embd / cfg.n_head) != TRN_OK)
        die("kv cache: %s", trn_error_reason());
    int Vp = cfg.padded_vocab, V = cfg.vocab_size;
    int *ctx = (int *)malloc(sizeof(int) * (size_t)(n_prompt + n_tok)), *ref = (int *)malloc(sizeof(int) * (size_t)n_tok);
    trn_rng rng;
    trn_rng_seed(&rng, 42);
    for (int i = 0; i < n_prompt; i++) ctx[i] = (int)trn_rng_below(&rng, (uint32_t)V);
    double *t_full = (double *)malloc(sizeof(double) * (size_t)reps), *t_pre = (double *)malloc(sizeof(double) * (size_t)reps);
    double *t_dec = (double *)malloc(sizeof(double) * (size_t)reps);
    char cpu[256];
    cpu_name(cpu, sizeof cpu);
    printf("gpt2_generate: %s (%.0fM parameters), prompt %d tokens, %d new tokens, %d reps, %d threads\n", p->name,
           g.m.n_floats / 1e6, n_prompt, n_tok, reps, threads);
    printf("cpu: %s\n", cpu);
    int mismatch = 0;
    for (int r = 0; r < reps; r++) {
        // without a cache: the whole context, every token
        double t0 = now_s();
        for (int i = 0; i < n_tok; i++) {
            int T = n_prompt + i;
            trn_reset(&g.m);
            trn_tensor *lg = gpt2_forward(&g, ctx, 1, T);
            ctx[T] = argmax(lg->data + (size_t)(T - 1) * Vp, V);
            if (r == 0) ref[i] = ctx[T];
            else if (ref[i] != ctx[T]) mismatch++;
        }
        t_full[r] = now_s() - t0;
        // with the cache: the prompt once, then one position per token
        trn_kv_cache_reset(&kv);
        t0 = now_s();
        trn_reset(&g.m);
        trn_tensor *lg = gpt2_forward_cached(&g, &kv, ctx, 1, n_prompt);
        ctx[n_prompt] = argmax(lg->data, V);
        double t1 = now_s();
        for (int i = 1; i < n_tok; i++) {
            trn_reset(&g.m);
            lg = gpt2_forward_cached(&g, &kv, ctx + n_prompt + i - 1, 1, 1);
            ctx[n_prompt + i] = argmax(lg->data, V);
        }
        t_pre[r] = t1 - t0;
        t_dec[r] = now_s() - t1;
        for (int i = 0; i < n_tok; i++) if (ctx[n_prompt + i] != ref[i]) mismatch++;
        printf("rep %d: no cache %.2f s (%d tokens) | cache: prefill %.3f s + %d tokens %.3f s\n", r + 1, t_full[r],
               n_tok, t_pre[r], n_tok - 1, t_dec[r]);
        fflush(stdout);
    }
    double full = median(t_full, reps), pre = median(t_pre, reps), dec = median(t_dec, reps);
    // per token: no cache, the average over n_tok tokens with contexts prompt .. prompt+n_tok-1;
    // with the cache, decode = the n_tok-1 tokens after the one the prefill gives
    double tps_full = n_tok / full, tps_dec = (n_tok - 1) / dec, tps_e2e = n_tok / (pre + dec);
    printf("\nmedians over %d reps:\n", reps);
    printf("  no cache      %8.3f tok/s   (%.3f s per token, context %d..%d)\n", tps_full, full / n_tok, n_prompt,
           n_prompt + n_tok - 1);
    printf("  cache decode  %8.3f tok/s   (%.4f s per token)          %.1fx\n", tps_dec, dec / (n_tok - 1),
           tps_dec / tps_full);
    printf("  cache e2e     %8.3f tok/s   (prefill %.3f s included)   %.1fx\n", tps_e2e, pre, tps_e2e / tps_full);
    printf("  the same tokens both ways: %s\n", mismatch ? "NO" : "yes");
    trn_ledger_print("memory");
    trn_kv_cache_free(&kv);
    gpt2_free(&g);
    free(ctx); free(ref); free(t_full); free(t_pre); free(t_dec);
    return mismatch ? 1 : 0;
}
