// gpt2 - how fast is a full GPT-2 training step with train.h, and how does
// that compare to the best matmul library on this machine?
//
// For each model (GPT-2 124M at B=4, T=64; the default "mini" preset of
// examples/gpt2 at its default batch) it prints:
//   - ms per training step (the median over --steps rounds, after a warm-up):
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
//   Each round times one step and then the products with both libraries
//   (see bench_model): ratios are medians of the rounds' own ratios.
//
//   bench/gpt2                 both models, 2 threads, 5 rounds (~1 minute)
//   bench/gpt2 --model mini    one of them;  --threads N, --steps N (rounds)
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

// seconds per call (the median of 3 calls; the caller warmed it up) of one product
static double time_product(const product *p, int blas, float *A, float *B, float *C) {
    double t[3];
    int lda = p->ta ? p->M : p->K, ldb = p->tb ? p->K : p->N;
    for (int r = 0; r < 3; r++) {
        double t0 = now_s();
        if (blas)
            cblas_sgemm(CblasRowMajor, p->ta ? CblasTrans : CblasNoTrans, p->tb ? CblasTrans : CblasNoTrans, p->M,
                        p->N, p->K, 1.0f, A, lda, B, ldb, p->beta, C, p->N);
        else
            trn_sgemm(p->ta, p->tb, p->M, p->N, p->K, 1.0f, A, lda, B, ldb, p->beta, C, p->N);
        t[r] = now_s() - t0;
    }
    return median(t, 3);
}

// the step's linear products and one set of operands large enough for each
typedef struct product_set {
    product p[16];
    int n;
    float *A, *B, *C;
} product_set;

static void products_init(product_set *s, const gpt2_config *c, int rows) {
    size_t most_a = 0, most_b = 0, most_c = 0;
    s->n = step_products(c, rows, s->p);
    for (int i = 0; i < s->n; i++) {
        const product *p = &s->p[i];
        size_t a = (size_t)p->M * p->K, b = (size_t)p->K * p->N, cc = (size_t)p->M * p->N;
        most_a = a > most_a ? a : most_a;
        most_b = b > most_b ? b : most_b;
        most_c = cc > most_c ? cc : most_c;
    }
    s->A = (float *)malloc(most_a * 4), s->B = (float *)malloc(most_b * 4), s->C = (float *)malloc(most_c * 4);
    if (!s->A || !s->B || !s->C) { fprintf(stderr, "bench: out of memory\n"); exit(1); }
    for (size_t i = 0; i < most_a; i++) s->A[i] = (float)((i * 7919) % 1000) / 1000.0f - 0.5f;
    for (size_t i = 0; i < most_b; i++) s->B[i] = (float)((i * 104729) % 1000) / 1000.0f - 0.5f;
    memset(s->C, 0, most_c * 4);
}

// GFLOP/s of the step's linear products (each weighted by how often the
// step makes it) with OpenBLAS (blas=1) or trn_sgemm
static double gemm_rate(product_set *s, int blas) {
    double flops = 0.0, secs = 0.0;
    sleep_s(0.15); // let the other library's spinning threads go to sleep
    for (int i = 0; i < s->n; i++) {
        const product *p = &s->p[i];
        flops += 2.0 * p->M * p->N * (double)p->K * p->count;
        secs += time_product(p, blas, s->A, s->B, s->C) * p->count;
    }
    return flops / secs / 1e9;
}

static int recompute; // --recompute: gpt2.recompute for every model

// One model, in `rounds` rounds. A round times one training step, then the
// step's products with OpenBLAS and with trn_sgemm (which library goes
// first alternates), so that each ratio compares measurements taken within
// seconds of each other: on a shared machine the slow moments then land on
// both sides of a ratio instead of on one side (timing all the steps first
// and the yardstick afterwards made the 124M ratio read 67-82% on the same
// build). Everything printed is a median over the rounds; the ratios are
// the medians of the rounds' own ratios, with their range.
static void bench_model(const char *name, const gpt2_config *cfg, int B, int T, int rounds) {
    gpt2 g;
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
    product_set ps;
    products_init(&ps, cfg, B * T);
    double flops = gpt2_step_flops(cfg, B, T);
    // per round: ms, fwd, bwd, opt, OpenBLAS GFLOP/s, trn_sgemm GFLOP/s, step/OpenBLAS, kit/OpenBLAS
    double *v = (double *)malloc(sizeof(double) * 8 * (size_t)rounds);
    double *ms = v, *fwd = v + rounds, *bwd = v + 2 * rounds, *optm = v + 3 * rounds;
    double *blas = v + 4 * rounds, *kit = v + 5 * rounds, *ratio = v + 6 * rounds, *kratio = v + 7 * rounds;
    float loss = 0.0f;
    for (int r = -1; r < rounds; r++) { // round -1: warm-up (first touch of every buffer, both libraries)
        sleep_s(0.15);
        double t0 = now_s();
        trn_zero_grad(&g.m);
        trn_reset(&g.m);
        trn_tensor *l = gpt2_loss(&g, x, y, B, T);
        loss = trn_item(&g.m, l);
        double t1 = now_s();
        trn_backward(&g.m, l);
        double t2 = now_s();
        float norm;
        trn_clip_grad_norm_async(&g.m, 1.0f, &norm); // as examples/gpt2 (one process)
        trn_adamw_step(&opt, &g.m, 1e-4f);
        g.m.backend->sync();
        double t3 = now_s();
        int first = r & 1; // 0: OpenBLAS first
        double rate[2];
        rate[first] = gemm_rate(&ps, first == 0);
        rate[!first] = gemm_rate(&ps, first != 0);
        if (r < 0) continue;
        ms[r] = 1e3 * (t3 - t0), fwd[r] = 1e3 * (t1 - t0), bwd[r] = 1e3 * (t2 - t1), optm[r] = 1e3 * (t3 - t2);
        blas[r] = rate[0], kit[r] = rate[1];
        ratio[r] = flops / (t3 - t0) / 1e9 / blas[r];
        kratio[r] = kit[r] / blas[r];
    }
    printf("%-6s L=%d C=%d V=%d, %.1fM params, B=%d T=%d: %.1f GFLOP per step, last loss %.3f%s\n", name,
           cfg->n_layer, cfg->n_embd, cfg->padded_vocab, g.m.n_floats / 1e6, B, T, flops / 1e9, loss,
           recompute ? " (--recompute: the blocks' forward runs twice, not counted)" : "");
    double lo = ratio[0], hi = ratio[0], klo = kratio[0], khi = kratio[0];
    for (int r = 1; r < rounds; r++) {
        lo = fmin(lo, ratio[r]), hi = fmax(hi, ratio[r]);
        klo = fmin(klo, kratio[r]), khi = fmax(khi, kratio[r]);
    }
    double step_ms = median(ms, rounds);
    printf("  step %8.1f ms  (forward+loss %.1f, backward %.1f, clip+AdamW %.1f)\n", step_ms, median(fwd, rounds),
           median(bwd, rounds), median(optm, rounds));
    printf("  %8.0f tokens/s   %7.1f GFLOP/s achieved\n", (double)B * T / (step_ms / 1e3), flops / (step_ms / 1e3) / 1e9);
    printf("  OpenBLAS sgemm on this step's linear products: %7.1f GFLOP/s   (trn_sgemm: %.1f, %.2fx OpenBLAS; "
           "%.2f-%.2f)\n", median(blas, rounds), median(kit, rounds), median(kratio, rounds), klo, khi);
    printf("  step rate / OpenBLAS rate: %.0f%% (%.0f-%.0f%% over the rounds)\n\n", 100.0 * median(ratio, rounds),
           100.0 * lo, 100.0 * hi);
    free(v);
    free(x);
    free(y);
    free(ps.A);
    free(ps.B);
    free(ps.C);
    trn_adamw_free(&opt);
    gpt2_free(&g);
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
            printf("usage: bench/gpt2 [--model gpt2|mini] [--threads N] [--steps N (rounds: one step and the products "
                   "with both libraries each)] [--recompute]\n");
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
    printf("bench/gpt2: %d threads, medians of %d rounds after a warm-up round; train.h kernels: %s; OpenBLAS kernel: "
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
