// gpt2 - how fast is a full GPT-2 training step with train.h, and how does
// that compare to the best matmul library on this machine?
//
// For each model (GPT-2 124M at B=4, T=64; the default "mini" preset of
// examples/gpt2 at its default batch) it prints:
//   - ms per training step (median of --steps timed steps after a warm-up):
//     zero_grad + forward + cross-entropy + backward + clip + AdamW,
//     split into forward / backward / optimizer,
//   - tokens/s and achieved GFLOP/s (matmul FLOPs only: 6 * matmul
//     parameters * tokens, plus attention's two T x T products per layer,
//     fwd + bwd),
//   - the OpenBLAS sgemm rate on the same step's linear-layer products
//     (every fwd / bwd-x / bwd-w shape, timed in this run, weighted by how
//     often the step makes it), and the kit's trn_sgemm on the same list;
//   - the ratio: achieved step GFLOP/s / OpenBLAS GFLOP/s. 100% would mean
//     the whole step (all the non-matmul work included) ran at OpenBLAS's
//     matmul speed.
//
//   bench/gpt2                 both models, 2 threads (~1 minute)
//   bench/gpt2 --model mini    one of them;  --threads N, --steps N
//   bench/gpt2 --recompute     each block a recompute region (what the
//                              memory saving costs in time)
//
// Timings are wall clock: run it on a quiet machine.
//
// OpenBLAS chooses its kernel from the CPU model. A CPU newer than the
// library (Debian 12 ships 0.3.21) can get an older kernel: on an AMD Zen 5
// it picks "Haswell" (AVX2) although AVX-512 is there. The bench prints the
// core OpenBLAS chose; OPENBLAS_CORETYPE=SkylakeX bench/gpt2 forces its
// AVX-512 kernels, for the fairer comparison.
//
// build: -lopenblas
// requires: have_lib libopenblas-dev cblas.h cblas_sgemm -lopenblas
#define GPT2_NO_MAIN
#include "examples/gpt2.c"

#include <cblas.h>

static void sleep_s(double s) {
    struct timespec ts;
    ts.tv_sec = (time_t)s;
    ts.tv_nsec = (long)((s - (double)ts.tv_sec) * 1e9);
    nanosleep(&ts, NULL);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// one product of a training step: C (M,N) = op(A) (M,K) @ op(B) (K,N)
typedef struct product {
    int ta, tb, M, N, K, count;
    float beta;
} product;

// the linear layers' products of one step for N = B*T rows: for y = x W^T
// with x (N,C), W (OC,C): fwd (N,OC), bwd-x (N,C) += dy W, bwd-w (OC,C) += dy^T x
static int step_products(const gpt2_config *c, int rows, product *out) {
    int C = c->n_embd, L = c->n_layer, n = 0;
    int shapes[5][3] = {{C, 3 * C, L}, {C, C, L}, {C, 4 * C, L}, {4 * C, C, L}, {C, c->padded_vocab, 1}};
    for (int s = 0; s < 5; s++) {
        int in = shapes[s][0], oc = shapes[s][1], cnt = shapes[s][2];
        product fwd = {0, 1, rows, oc, in, cnt, 0.0f};
        product bx = {0, 0, rows, in, oc, cnt, 1.0f};
        product bw = {1, 0, oc, in, rows, cnt, 1.0f};
        out[n++] = fwd;
        out[n++] = bx;
        out[n++] = bw;
    }
    return n;
}

// seconds per call (median of reps after a warm-up) of one product
static double time_product(const product *p, int blas, float *A, float *B, float *C) {
    double t[7];
    int reps = 5;
    int lda = p->ta ? p->M : p->K, ldb = p->tb ? p->K : p->N;
    for (int r = -1; r < reps; r++) {
        double t0 = now_s();
        if (blas)
            cblas_sgemm(CblasRowMajor, p->ta ? CblasTrans : CblasNoTrans, p->tb ? CblasTrans : CblasNoTrans, p->M,
                        p->N, p->K, 1.0f, A, lda, B, ldb, p->beta, C, p->N);
        else
            trn_sgemm(p->ta, p->tb, p->M, p->N, p->K, 1.0f, A, lda, B, ldb, p->beta, C, p->N);
        if (r >= 0) t[r] = now_s() - t0;
    }
    return median(t, reps);
}

// GFLOP/s of the step's linear products with OpenBLAS (blas=1) or trn_sgemm
static double gemm_rate(const gpt2_config *c, int rows, int blas) {
    product p[16];
    int n = step_products(c, rows, p);
    size_t most_a = 0, most_b = 0, most_c = 0;
    for (int i = 0; i < n; i++) {
        size_t a = (size_t)p[i].M * p[i].K, b = (size_t)p[i].K * p[i].N, cc = (size_t)p[i].M * p[i].N;
        most_a = a > most_a ? a : most_a;
        most_b = b > most_b ? b : most_b;
        most_c = cc > most_c ? cc : most_c;
    }
    float *A = (float *)malloc(most_a * 4), *B = (float *)malloc(most_b * 4), *C = (float *)malloc(most_c * 4);
    if (!A || !B || !C) { fprintf(stderr, "bench: out of memory\n"); exit(1); }
    for (size_t i = 0; i < most_a; i++) A[i] = (float)((i * 7919) % 1000) / 1000.0f - 0.5f;
    for (size_t i = 0; i < most_b; i++) B[i] = (float)((i * 104729) % 1000) / 1000.0f - 0.5f;
    memset(C, 0, most_c * 4);
    sleep_s(0.15); // let the other library's spinning threads go to sleep
    double flops = 0.0, secs = 0.0;
    for (int i = 0; i < n; i++) {
        flops += 2.0 * p[i].M * p[i].N * (double)p[i].K * p[i].count;
        secs += time_product(&p[i], blas, A, B, C) * p[i].count;
    }
    free(A);
    free(B);
    free(C);
    return flops / secs / 1e9;
}

static int recompute; // --recompute: gpt2.recompute for every model

typedef struct bench_result {
    double ms, fwd, bwd, opt, tok_s, gflops, blas, kit;
} bench_result;

static bench_result bench_model(const char *name, const gpt2_config *cfg, int B, int T, int steps) {
    bench_result res;
    gpt2 g;
    memset(&res, 0, sizeof res);
    if (gpt2_create(&g, cfg, GPT2_BACKEND()) != TRN_OK) {
        fprintf(stderr, "bench: %s: %s\n", name, trn_error_reason());
        exit(1);
    }
    gpt2_init_weights(&g, 1);
    g.recompute = recompute;
    int *x = (int *)malloc(sizeof(int) * (size_t)B * T), *y = (int *)malloc(sizeof(int) * (size_t)B * T);
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
    double *t_all = (double *)malloc(sizeof(double) * 4 * (size_t)steps);
    double *t_fwd = t_all + steps, *t_bwd = t_all + 2 * steps, *t_opt = t_all + 3 * steps;
    float loss = 0.0f;
    sleep_s(0.15);
    for (int s = -1; s < steps; s++) { // step -1: warm-up (first-touch of every buffer)
        double t0 = now_s();
        trn_zero_grad(&g.m);
        trn_reset(&g.m);
        trn_tensor *l = gpt2_loss(&g, x, y, B, T);
        loss = trn_item(&g.m, l);
        double t1 = now_s();
        trn_backward(&g.m, l);
        double t2 = now_s();
        trn_clip_grad_norm(&g.m, 1.0f);
        trn_adamw_step(&opt, &g.m, 1e-4f);
        g.m.backend->sync();
        double t3 = now_s();
        if (s >= 0) {
            t_all[s] = t3 - t0;
            t_fwd[s] = t1 - t0;
            t_bwd[s] = t2 - t1;
            t_opt[s] = t3 - t2;
        }
    }
    double flops = gpt2_step_flops(cfg, B, T);
    res.ms = 1e3 * median(t_all, steps);
    res.fwd = 1e3 * median(t_fwd, steps);
    res.bwd = 1e3 * median(t_bwd, steps);
    res.opt = 1e3 * median(t_opt, steps);
    res.tok_s = (double)B * T / (res.ms / 1e3);
    res.gflops = flops / (res.ms / 1e3) / 1e9;
    printf("%-6s L=%d C=%d V=%d, %.1fM params, B=%d T=%d: %.1f GFLOP per step, last loss %.3f%s\n", name,
           cfg->n_layer, cfg->n_embd, cfg->padded_vocab, g.m.n_floats / 1e6, B, T, flops / 1e9, loss,
           recompute ? " (--recompute: the blocks' forward runs twice, not counted)" : "");
    free(t_all);
    free(x);
    free(y);
    trn_adamw_free(&opt);
    gpt2_free(&g);
    res.blas = gemm_rate(cfg, B * T, 1);
    res.kit = gemm_rate(cfg, B * T, 0);
    printf("  step %8.1f ms  (forward+loss %.1f, backward %.1f, clip+AdamW %.1f)\n", res.ms, res.fwd, res.bwd, res.opt);
    printf("  %8.0f tokens/s   %7.1f GFLOP/s achieved\n", res.tok_s, res.gflops);
    printf("  OpenBLAS sgemm on this step's linear products: %7.1f GFLOP/s   (trn_sgemm: %.1f, %.2fx OpenBLAS)\n",
           res.blas, res.kit, res.kit / res.blas);
    printf("  step rate / OpenBLAS rate: %.0f%%\n\n", 100.0 * res.gflops / res.blas);
    return res;
}

// the kernel path train.h was compiled for (the same tests as its #ifs)
static const char *isa_path(void) {
#if defined(TRAIN_USE_CBLAS)
    return "CBLAS (TRAIN_USE_CBLAS)";
#elif defined(__AVX512F__)
    return "AVX-512";
#elif defined(__AVX2__) && defined(__FMA__)
    return "AVX2+FMA";
#elif defined(__ARM_NEON) && defined(__aarch64__)
    return "AArch64 NEON";
#else
    return "plain C (no SIMD path: build with -march=native?)";
#endif
}

int main(int argc, char **argv) {
    int threads = 2, steps = 5;
    const char *only = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help")) {
            printf("usage: bench/gpt2 [--model gpt2|mini] [--threads N] [--steps N] [--recompute]\n");
            return 0;
        } else if (!strcmp(argv[i], "--recompute")) {
            recompute = 1;
        } else if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
            threads = (int)parse_int("--threads", argv[++i], 1, 1024);
        } else if (!strcmp(argv[i], "--steps") && i + 1 < argc) {
            steps = (int)parse_int("--steps", argv[++i], 1, 1000);
        } else if (!strcmp(argv[i], "--model") && i + 1 < argc) {
            only = argv[++i];
            if (strcmp(only, "gpt2") && strcmp(only, "mini")) die("bench: --model gpt2 or mini, not '%s'", only);
        } else {
            die("bench: unknown argument '%s' (see --help)", argv[i]);
        }
    }
    openblas_set_num_threads(threads);
    trn_set_threads(threads);
    printf("bench/gpt2: %d threads, median of %d steps after a warm-up step; train.h kernels: %s; OpenBLAS kernel: "
           "%s\n\n", threads, steps, isa_path(), openblas_get_corename());
    if (!only || !strcmp(only, "gpt2")) {
        const preset *p = find_preset("gpt2");
        bench_model("gpt2", &p->cfg, 4, 64, steps);
    }
    if (!only || !strcmp(only, "mini")) {
        const preset *p = find_preset("mini");
        bench_model("mini", &p->cfg, p->batch, p->seq, steps);
    }
    return 0;
}
