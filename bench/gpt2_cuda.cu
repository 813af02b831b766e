// gpt2_cuda - how fast does GPT-2 train on one GPU with train_cuda.h?
//
// One run measures it on whatever GPU is there:
//
//   ./build.sh && ./bench/gpt2_cuda          GPT-2 124M, B=16, T=1024, TF32 matmuls
//   ./bench/gpt2_cuda --precision bf16       bf16 mixed precision (fp32 master weights)
//   ./bench/gpt2_cuda --precision fp32       plain fp32 matmuls (no tensor cores)
//   ./bench/gpt2_cuda --batch 8              half the activations (40 GB GPUs)
//   ./bench/gpt2_cuda --peak-tflops 312      MFU against your own peak figure
//
// It builds the model of examples/gpt2.c (the same source, included with
// GPT2_NO_MAIN; gpt2_backend() picks train_cuda.h's backend), runs one
// warm-up step (the activation arena is sized there, cuBLAS picks its
// kernels) and then --steps timed training steps: zero_grad + forward +
// cross-entropy + backward + clip + AdamW, as examples/gpt2 runs them: the
// loss and the gradient norm come back asynchronously, and the step's one
// host wait (trn_sync) is at its end, so the wall clock from the start of
// a step to that wait measures the GPU's work. The forward / backward /
// optimizer split is timed with CUDA events on the stream (no waits).
//
// It prints ms per step (median, and the forward / backward / optimizer
// split), tokens/s, the achieved TFLOP/s and the MFU (model FLOPs
// utilization) = achieved / the device's peak. The FLOPs are those of
// bench/gpt2 (gpt2_step_flops in examples/gpt2.c): 6 * matmul parameters
// * tokens (every linear layer, the LM head counted once, no embedding
// lookups, no biases or LayerNorms) plus attention's two (T,T) products
// per layer, 3 * L * 4*B*T*T*C (forward + backward; counted as the full
// square even when causal, where the fused kernels skip the masked blocks). The peak is the dense
// (no sparsity) rate of the precision's matmuls: the bf16 or the TF32
// tensor-core rate, or the fp32 (CUDA core) rate, from a small table of
// NVIDIA datasheet figures looked up by device name; other devices need
// --peak-tflops.
//
// Memory: the arena keeps what backward reads (with --recompute only each
// block's input, and one block's inside during its backward); the fused
// attention saves only one log-sum-exp per row, (B,NH,T) per layer, never
// the (B,NH,T,T) probabilities (backward rebuilds them tile by tile, with
// no scratch of that size); activation gradients
// live in their own block, each freed after its producer's backward; the
// classifier never holds the (B,T,Vp) logits. The bench prints that
// estimate before it allocates, and stops (exit 1) when it will not fit in
// the free device memory; the ledger's device view at the end shows what
// was actually allocated.
//
// --profile: after the timed steps, one more step with the time ledger on
// (train_cuda.h's >>sites, bench/gpt2_sites.h): a CUDA event where each
// launch site opens and closes, read after the step; prints the table of
// bench/gpt2_plan with a measured column and floor / measured per site
// (--profile-csv FILE: the same rows as CSV).
//
// Without a GPU it prints the one-line reason and exits with code 2.
//
// build: -lcublas -lcublasLt
// requires: test -f train_cuda.h && have_cuda_lib nvidia-cuda-dev cublas_v2.h cublasCreate_v2 -lcublas && have_cuda_lib nvidia-cuda-dev cublasLt.h cublasLtCreate -lcublasLt
#define TRN_USE_CUDA
#define GPT2_NO_MAIN
#include "examples/gpt2.c"
#include "bench/gpt2_sites.h"

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// >>estimate: the bytes one training step needs on the device, before
// anything is allocated. Counted from what gpt2_loss records (see train.h:
// each op's saved outputs live in the arena until trn_reset; activation
// gradients in their own block, each freed after its producer's backward).
typedef struct mem_estimate {
    double params;      // parameter elements (wte, wpe, blocks, ln_f)
    double state;       // bytes: weights + grads + AdamW m and v
    double attn;        // bytes: the attention's saved lse rows, (B,NH,T) per layer kept
    double classifier;  // bytes: the fused classifier's saved dx, dW and chunk scratch
    double arena;       // bytes: the activation arena (attn included)
    double act_grads;   // bytes: the activation-gradient block (classifier included)
    double activations; // bytes: arena + act_grads
} mem_estimate;

static mem_estimate estimate_memory(const gpt2_config *c, int B, int T, int recompute, int materialized, int bf16) {
    mem_estimate e;
    double C = c->n_embd, L = c->n_layer, NH = c->n_head, Vp = c->padded_vocab, tok = (double)B * T;
    double A = bf16 ? 2.0 : 4.0;
    e.params = Vp * C + (double)c->block_size * C + L * (12.0 * C * C + 13.0 * C) + 2.0 * C;
    e.state = 4.0 * 4.0 * e.params + (bf16 ? 2.0 * e.params : 0.0); // + the bf16 weight copy
    // per token: embeddings: 2 id arrays (ints), 2 lookups + add
    double emb = A * 3.0 * C + 4.0 * 2.0;
    // each block: ln_1, qkv (3C), attention out, proj (the residual add
    // writes over it), ln_2, fc (4C), gelu (4C), fc proj (the same) = 16C;
    // two LayerNorms' mean and rstd (4);
    // the fused attention's lse, NH per token (one per head and row: no
    // (T,T) probabilities, no backward scratch).
    // --attention materialized: each layer keeps its (B,NH,T,T) probabilities
    // instead (activations), and backward borrows one more (B,NH,T,T) from
    // the gradient block
    // Bytes: A per activation value (4, or 2 in bf16); 4 per statistic
    // (mean, rstd, lse, loss) and per id, whatever the precision
    double block = A * 16.0 * C + 4.0 * 4.0 + (materialized ? A * NH * (double)T : 4.0 * NH);
    // ln_f (C + mean/rstd), targets, losses
    double head = A * C + 4.0 * 4.0;
    // --recompute: each block keeps its output (= the next one's input),
    // and one block's inside exists again during its backward
    double blocks = recompute ? L * A * C + block : L * block;
    e.attn = tok * (recompute ? 1.0 : L) * (materialized ? A * NH * (double)T : 4.0 * NH);
    e.arena = tok * (emb + blocks + head);
    // the classifier's forward, the smaller of: dx (C per token), dW
    // (Vp,C, fp32) and two chunks of R rows of logits; or dlogits and
    // logits (Vp per token each). Backward, inside the MLP: 9C per token
    // live, 11C with the first-fit gaps (tests/test_memory.c)
    double R = fmin(tok, floor(8388608.0 / Vp));
    e.classifier = fmin(A * tok * C + 4.0 * Vp * C + A * 2.0 * R * Vp + 4.0 * R, A * 2.0 * tok * Vp + 4.0 * tok);
    e.act_grads = fmax(e.classifier, A * tok * 11.0 * C + (materialized ? A * tok * NH * T : 0.0));
    e.activations = e.arena + e.act_grads;
    return e;
}

// >>peak: NVIDIA datasheet figures, TFLOP/s, dense (the datasheets print
// the tensor-core rates "with sparsity": these are half of those).
typedef struct peak_row {
    const char *match; // a substring of cudaDeviceProp.name
    const char *what;
    double fp32, tf32, bf16;
} peak_row;

static const peak_row PEAKS[] = {
    // first match wins: the specific names before the general ones
    {"H100 PCIe", "H100 PCIe", 51.0, 378.0, 756.0},
    {"H100 NVL", "H100 NVL", 60.0, 417.5, 835.5},
    {"H100", "H100 SXM", 67.0, 494.7, 989.4},
    {"H200", "H200 SXM", 67.0, 494.7, 989.4},
    {"GH200", "GH200", 67.0, 494.7, 989.4},
    {"H800", "H800 SXM", 67.0, 494.7, 989.4},
    {"A100", "A100", 19.5, 156.0, 312.0},
    {"A800", "A800", 19.5, 156.0, 312.0},
};

static const peak_row *find_peak(const char *name) {
    for (size_t i = 0; i < sizeof PEAKS / sizeof PEAKS[0]; i++)
        if (strstr(name, PEAKS[i].match)) return &PEAKS[i];
    return NULL;
}

static void usage(void) {
    printf("usage: bench/gpt2_cuda [--model gpt2] [--batch 16] [--seq 1024] [--steps 10] [--precision tf32]\n"
           "                       [--recompute] [--attention fused|materialized] [--peak-tflops X]\n"
           "  --model NAME        a preset of examples/gpt2 (mini, tiny, gpt2, gpt2-medium, ...) [gpt2]\n"
           "  --batch B --seq T   the micro-batch [16 x 1024]\n"
           "  --steps N           timed steps after one warm-up step [10]\n"
           "  --precision P       fp32 | tf32 (fp32 values, TF32 tensor-core matmuls) | bf16 (mixed\n"
           "                      precision: bf16 activations and weight copy, fp32 master weights) [tf32]\n"
           "  --tf32 0|1          the same as --precision tf32 (1) or fp32 (0)\n"
           "  --recompute         each block a recompute region (activation checkpointing)\n"
           "  --attention KIND    fused (flash-style, saves (B,NH,T)) or materialized\n"
           "                      (saves the (B,NH,T,T) probabilities, cuBLAS products) [fused in bf16,\n"
           "                      materialized in fp32 and tf32: on an H100 the fp32 fused kernels took\n"
           "                      381 ms per TF32 step, materialized 119.5 ms (2026-11-27)]\n"
           "  --dq-atomic         bf16 attention backward: dQ added with fp32 atomics (FA2's way: 5\n"
           "                      products, not 7; the last bits of dQ change from run to run)\n"
           "  --peak-tflops X     the device's peak for MFU, when the table does not know it\n"
           "  --profile           then one step with CUDA events per launch site: the time ledger's table\n"
           "  --profile-csv FILE  the same, and its rows as CSV\n");
}

int main(int argc, char **argv) {
    const char *model = "gpt2";
    int B = 16, T = 1024, steps = 10, recompute = 0, materialized = -1, dq_atomic = 0; // materialized -1: by the precision
    int prec = TRN_CUDA_TF32;
    double peak_arg = 0.0;
    int profile = 0;
    const char *profile_csv = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help")) {
            usage();
            return 0;
        } else if (!strcmp(argv[i], "--recompute")) {
            recompute = 1;
        } else if (!strcmp(argv[i], "--profile")) {
            profile = 1;
        } else if (!strcmp(argv[i], "--dq-atomic")) {
            dq_atomic = 1;
        } else if (i + 1 >= argc) {
            die("unknown argument or missing value '%s' (see --help)", argv[i]);
        } else if (!strcmp(argv[i], "--attention")) {
            const char *v = argv[++i];
            if (strcmp(v, "fused") && strcmp(v, "materialized")) die("--attention: fused or materialized, not '%s'", v);
            materialized = !strcmp(v, "materialized");
        } else if (!strcmp(argv[i], "--model")) {
            model = argv[++i];
        } else if (!strcmp(argv[i], "--batch")) {
            B = (int)parse_int("--batch", argv[++i], 1, 4096);
        } else if (!strcmp(argv[i], "--seq")) {
            T = (int)parse_int("--seq", argv[++i], 1, 1 << 20);
        } else if (!strcmp(argv[i], "--steps")) {
            steps = (int)parse_int("--steps", argv[++i], 1, 10000);
        } else if (!strcmp(argv[i], "--tf32")) {
            prec = parse_int("--tf32", argv[++i], 0, 1) ? TRN_CUDA_TF32 : TRN_CUDA_FP32;
        } else if (!strcmp(argv[i], "--precision")) {
            const char *v = argv[++i];
            if ((prec = trn_cuda_precision_parse(v)) < 0) die("--precision: fp32, tf32 or bf16, not '%s'", v);
        } else if (!strcmp(argv[i], "--profile-csv")) {
            profile = 1;
            profile_csv = argv[++i];
        } else if (!strcmp(argv[i], "--peak-tflops")) {
            peak_arg = parse_float("--peak-tflops", argv[++i], 1e-3, 1e6);
        } else {
            die("unknown argument '%s' (see --help)", argv[i]);
        }
    }
    if (materialized < 0) materialized = prec != TRN_CUDA_BF16;
    const preset *pre = find_preset(model);
    if (!pre) die("--model: no preset '%s' (see examples/gpt2 --help)", model);
    const gpt2_config *cfg = &pre->cfg;
    if (T > cfg->block_size) die("--seq %d is longer than the model's context (%d)", T, cfg->block_size);

    // no GPU (or an old driver): one line, exit 2
    if (trn_cuda_init(0) != TRN_OK) {
        fprintf(stderr, "bench/gpt2_cuda: %s\n", trn_error_reason());
        return 2;
    }
    if (trn_cuda_set_precision((trn_cuda_precision)prec) != TRN_OK) die("%s", trn_error_reason());
    if (dq_atomic && trn_cuda_set_flash(TRN_CUDA_FLASH_FA2, 1) != TRN_OK) die("%s", trn_error_reason());
    const char *dev = trn_cuda_device_name();
    const peak_row *pk = find_peak(dev);
    double peak = peak_arg > 0.0 ? peak_arg
                  : pk ? (prec == TRN_CUDA_BF16 ? pk->bf16 : prec == TRN_CUDA_TF32 ? pk->tf32 : pk->fp32) : 0.0;

    double flops = gpt2_step_flops(cfg, B, T);
    mem_estimate me = estimate_memory(cfg, B, T, recompute, materialized, prec == TRN_CUDA_BF16);
    size_t free_b = 0, total_b = 0, free_start = 0;
    cudaMemGetInfo(&free_b, &total_b);
    free_start = free_b;
    printf("bench/gpt2_cuda: %s, %.1f GB, precision %s; median of %d steps after a warm-up step\n", dev,
           total_b / 1e9, trn_cuda_precision_name((trn_cuda_precision)prec), steps);
    printf("%s: L=%d NH=%d C=%d Vp=%d, %.1fM parameters, B=%d T=%d (%d tokens/step): %.1f TFLOP per step\n", model,
           cfg->n_layer, cfg->n_head, cfg->n_embd, cfg->padded_vocab, me.params / 1e6, B, T, B * T, flops / 1e12);
    printf("device memory, estimated: %.1f GB = weights+grads+AdamW %.2f GB + activations %.1f GB + act grads %.2f GB\n"
           "  (of which attention, saved for backward %.3f GB, classifier %.2f GB)%s;"
           " %.1f GB free\n",
           (me.state + me.activations) / 1e9, me.state / 1e9, me.arena / 1e9, me.act_grads / 1e9, me.attn / 1e9,
           me.classifier / 1e9, recompute ? ", --recompute" : materialized ? ", --attention materialized" : "", free_b / 1e9);
    fflush(stdout);
    if (me.state + me.activations > 0.97 * (double)free_b) {
        int fit = (int)((0.97 * (double)free_b - me.state) / (me.activations / B));
        fprintf(stderr, "bench/gpt2_cuda: the step needs about %.1f GB and %.1f GB are free: try --batch %d\n",
                (me.state + me.activations) / 1e9, free_b / 1e9, fit > 1 ? fit : 1);
        return 1;
    }

    gpt2 g;
    CHECK_OK(gpt2_create(&g, cfg, GPT2_BACKEND()));
    gpt2_init_weights(&g, 1);
    g.recompute = recompute;
    g.m.attention_materialized = materialized;
    int *x = (int *)malloc(sizeof(int) * (size_t)B * T), *y = (int *)malloc(sizeof(int) * (size_t)B * T);
    double *t_all = (double *)malloc(sizeof(double) * 4 * (size_t)steps);
    if (!x || !y || !t_all) die("out of host memory");
    double *t_fwd = t_all + steps, *t_bwd = t_all + 2 * steps, *t_opt = t_all + 3 * steps;
    trn_rng rng;
    trn_rng_seed(&rng, 7);
    for (int i = 0; i < B * T; i++) {
        x[i] = (int)trn_rng_below(&rng, (uint32_t)cfg->vocab_size);
        y[i] = (int)trn_rng_below(&rng, (uint32_t)cfg->vocab_size);
    }
    trn_adamw opt;
    trn_adamw_desc od;
    memset(&od, 0, sizeof od);
    od.beta2 = 0.95f;
    od.weight_decay = 0.1f;
    trn_adamw_init(&opt, &od);
    float loss = 0.0f, first_loss = 0.0f, norm = 0.0f;
    double sum_ms = 0.0;
    cudaStream_t stream = (cudaStream_t)trn_cuda_stream();
    cudaEvent_t ev[4]; // start, forward done, backward done, AdamW done
    for (int k = 0; k < 4; k++) TRN_CUDA_CHECK(cudaEventCreate(&ev[k]));
    for (int s = -1; s < steps; s++) { // step -1: warm-up (arena sizing, cuBLAS heuristics)
        double t0 = now_s();           // the GPU is idle here: the last step ended with trn_sync
        TRN_CUDA_CHECK(cudaEventRecord(ev[0], stream));
        trn_zero_grad(&g.m);
        trn_reset(&g.m);
        trn_tensor *l = gpt2_loss(&g, x, y, B, T);
        trn_item_async(&g.m, l, &loss); // lands at trn_sync
        TRN_CUDA_CHECK(cudaEventRecord(ev[1], stream));
        trn_backward(&g.m, l);
        TRN_CUDA_CHECK(cudaEventRecord(ev[2], stream));
        trn_clip_grad_norm_async(&g.m, 1.0f, &norm);
        trn_adamw_step(&opt, &g.m, 1e-4f);
        TRN_CUDA_CHECK(cudaEventRecord(ev[3], stream));
        trn_sync(&g.m); // the step's one host wait
        double t3 = now_s();
        float ms_fwd = 0, ms_bwd = 0, ms_opt = 0;
        TRN_CUDA_CHECK(cudaEventElapsedTime(&ms_fwd, ev[0], ev[1]));
        TRN_CUDA_CHECK(cudaEventElapsedTime(&ms_bwd, ev[1], ev[2]));
        TRN_CUDA_CHECK(cudaEventElapsedTime(&ms_opt, ev[2], ev[3]));
        if (s < 0) {
            first_loss = loss;
            printf("warm-up step: %.0f ms, loss %.3f (ln V = %.3f)\n", 1e3 * (t3 - t0), loss,
                   log((double)cfg->vocab_size));
            fflush(stdout);
        } else {
            t_all[s] = t3 - t0;
            t_fwd[s] = ms_fwd / 1e3;
            t_bwd[s] = ms_bwd / 1e3;
            t_opt[s] = ms_opt / 1e3;
            sum_ms += 1e3 * (t3 - t0);
        }
    }
    double ms = 1e3 * median(t_all, steps), fwd = 1e3 * median(t_fwd, steps), bwd = 1e3 * median(t_bwd, steps),
           op = 1e3 * median(t_opt, steps);
    double tok_s = (double)B * T / (ms / 1e3), tflops = flops / (ms / 1e3) / 1e12;
    printf("\nstep %.1f ms median, %.1f ms mean  (on the GPU: forward+loss %.1f, backward %.1f, clip+AdamW %.1f;"
           " one host wait per step)\n", ms, sum_ms / steps, fwd, bwd, op);
    printf("%.0f tokens/s   %.1f TFLOP/s achieved (FLOPs as bench/gpt2: 6 x matmul params x tokens + attention)\n",
           tok_s, tflops);
    if (peak > 0.0)
        printf("MFU %.1f%% of %.1f TFLOP/s (%s)\n", 100.0 * tflops / peak, peak,
               peak_arg > 0.0 ? "--peak-tflops"
               : prec == TRN_CUDA_BF16 ? "bf16 tensor-core peak, dense, NVIDIA datasheet"
               : prec == TRN_CUDA_TF32 ? "TF32 tensor-core peak, dense, NVIDIA datasheet"
                                       : "fp32 peak, NVIDIA datasheet");
    else
        printf("MFU: unknown peak for '%s', pass --peak-tflops\n", dev);
    printf("loss %.3f -> %.3f over %d steps (last gradient norm %.3f)\n\n", first_loss, loss, steps + 1, norm);
    if (profile) { // the time ledger, measured: one more step with an event per site
        const trn_cuda_site_row *rows;
        trn_cuda_sites_start(1);
        plan_gpt2_step(&g, &opt, x, y, B, T);
        int n = trn_cuda_sites_read(&rows);
        printf("time ledger, measured (CUDA events per launch site, one step; eff = floor / measured):\n");
        plan_sums ps = plan_print(stdout, rows, n, (trn_cuda_precision)prec, 1);
        printf("sites: %.2f ms floor, %.2f ms measured in sites (step %.1f ms), %lld launches\n\n", ps.floor_ms,
               ps.measured_ms, ms, ps.launches);
        if (profile_csv && plan_csv(profile_csv, rows, n, (trn_cuda_precision)prec) != 0)
            die("--profile-csv: cannot write '%s'", profile_csv);
    }
    // like for like: the estimate leaves out the runtime (context, cuBLAS)
    // and the small reduction scratch
    double kit = 0.0, all = 0.0;
    trn_kind kinds[6] = {TRN_KIND_WEIGHTS, TRN_KIND_WEIGHTS_BF16, TRN_KIND_GRADS, TRN_KIND_OPTIM, TRN_KIND_ACTIVATIONS,
                         TRN_KIND_ACT_GRADS};
    for (int k = 0; k < 6; k++) kit += (double)trn_ledger_peak(TRN_DEVICE, kinds[k]);
    for (int k = 0; k < TRN_KIND_COUNT; k++) all += (double)trn_ledger_current(TRN_DEVICE, (trn_kind)k);
    cudaMemGetInfo(&free_b, &total_b);
    printf("device memory for weights (+bf16 copy)+grads+AdamW+activations+act grads: estimated %.3f GB, "
           "the ledger's peak %.3f GB (%.2f GiB)\n", (me.state + me.activations) / 1e9, kit / 1e9, kit / 1073741824.0);
    printf("device memory in use now: the ledger %.3f GB (runtime included), cudaMemGetInfo %.3f GB "
           "(total - free; %.3f GB before the model)\n", all / 1e9, (total_b - free_b) / 1e9,
           (total_b - free_start) / 1e9);
    trn_ledger_print("memory (peak = the step's high-water mark)");
    for (int k = 0; k < 4; k++) TRN_CUDA_CHECK(cudaEventDestroy(ev[k]));
    free(t_all);
    free(x);
    free(y);
    trn_adamw_free(&opt);
    gpt2_free(&g);
    return 0;
}
