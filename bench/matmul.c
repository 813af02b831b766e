// matmul - GFLOP/s of train.h's trn_sgemm next to OpenBLAS's cblas_sgemm, on
// the products one GPT-2 124M training step makes, measured side by side in
// one run.
//
//   bench/matmul               all shapes, 2 threads (about 2-3 minutes)
//   bench/matmul --quick       N=256 rows only, fewer repetitions (~40 s)
//   bench/matmul --threads 1   one thread for both libraries
//
// For each linear layer y = x W^T (x: N x C rows, W: OC x C as nn.Linear
// stores it) training runs three products, the three rows of the table:
//   fwd    out  (N,OC) = inp (N,C) @ W^T          trn_sgemm(0,1,...)  beta 0
//   bwd-x  dinp (N,C) += dout (N,OC) @ W          trn_sgemm(0,0,...)  beta 1
//   bwd-w  dW  (OC,C) += dout^T (OC,N) @ inp      trn_sgemm(1,0,...)  beta 1
// The layers of GPT-2 124M (C=768): qkv (OC=3C), attention projection
// (OC=C), MLP up (OC=4C), MLP down (C=4C -> OC=C) and the LM head
// (OC=V=50304), for N = B*T = 256 and 4096 rows.
// Each product is timed in 3 rounds, the two libraries taking turns (which
// goes first alternates), each side the median of several timed calls
// after one warm-up call; a cell is the median over the rounds, and
// "ratio" the median of the rounds' kit / OpenBLAS (above 1: the kit is
// faster). Timing one side's calls all at once and then the other's let
// the machine's slow moments fall on one side: on a 2-core EPYC
// (2026-11-28) one product read 0.65-0.98 that way and 0.99-1.06 in
// alternating rounds. A last table times
// small products (one attention head, a few rows) for information; the
// attention ones run on one thread for both, as the kit runs them (one head
// per thread inside the attention op's own parallel loop).
//
// Both libraries keep worker threads that spin for a while after a call
// (OpenBLAS for up to ~0.1 s), which would steal a core from the other one;
// the bench therefore sleeps 0.15 s before timing each side.
// Run it on an otherwise idle machine: when other processes compete for the
// cores, each call waits for its slowest thread to get a time slice, and
// both columns swing by 2-10x from call to call. The bench prints a warning
// when it sees other processes running before or after it; compare runs on
// an idle machine only.
//
// build: -lopenblas
// requires: have_lib libopenblas-dev cblas.h cblas_sgemm -lopenblas
#define TRAIN_IMPLEMENTATION
#include "train.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct product {
    const char *layer, *what; /* "qkv", "fwd" */
    int rows;                 /* N = B*T of the step it belongs to */
    int ta, tb, M, N, K;
    float beta;
    int one_thread;           /* run on one thread, as the kit does (attention) */
} product;

typedef struct result {
    double kit, blas;   /* GFLOP/s, median over the rounds */
    double ratio;       /* median over the rounds of kit / blas */
    double max_err;     /* max |kit - blas| / (sum |a||b| scale) of the warm-up call */
} result;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

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

static float *buf_a, *buf_b, *buf_kit, *buf_blas;

static void run_kit(const product *p, float beta, float *C) {
    trn_sgemm(p->ta, p->tb, p->M, p->N, p->K, 1.0f, buf_a, p->ta ? p->M : p->K, buf_b,
              p->tb ? p->K : p->N, beta, C, p->N);
}

static void run_blas(const product *p, float beta, float *C) {
    cblas_sgemm(CblasRowMajor, p->ta ? CblasTrans : CblasNoTrans, p->tb ? CblasTrans : CblasNoTrans,
                p->M, p->N, p->K, 1.0f, buf_a, p->ta ? p->M : p->K, buf_b, p->tb ? p->K : p->N,
                beta, C, p->N);
}

static int g_threads; /* --threads */

/* median GFLOP/s of `reps` calls after one warm-up call, on one side */
static double time_side(int kit, const product *p, int reps) {
    double t[64], flops = 2.0 * p->M * p->N * p->K;
    float *C = kit ? buf_kit : buf_blas;
    int r, nt = p->one_thread ? 1 : g_threads;
    openblas_set_num_threads(nt);
    trn_set_threads(nt);
    sleep_s(0.15);
    if (kit) run_kit(p, 0.0f, C); else run_blas(p, 0.0f, C);
    for (r = 0; r < reps; r++) {
        double t0 = now_s();
        if (kit) run_kit(p, p->beta, C); else run_blas(p, p->beta, C);
        t[r] = now_s() - t0;
    }
    qsort(t, (size_t)reps, sizeof(double), cmp_double);
    return flops / t[reps / 2] * 1e-9;
}

#define ROUNDS 3
static double median3(double a, double b, double c) {
    return a > b ? (b > c ? b : a > c ? c : a) : (a > c ? a : b > c ? c : b);
}

static result measure(const product *p, double budget_s) {
    result res;
    double flops = 2.0 * p->M * p->N * p->K, kit[ROUNDS], blas[ROUNDS], ratio[ROUNDS];
    /* as many calls as fit the budget at ~200 GFLOP/s, over the rounds: 3..5 a round, odd */
    int reps = (int)(budget_s * 200e9 / flops) / ROUNDS, r;
    size_t i, n = (size_t)p->M * p->N;
    reps = reps < 3 ? 3 : reps > 5 ? 5 : reps;
    reps |= 1;
    for (r = 0; r < ROUNDS; r++) { /* the libraries take turns; who goes first alternates */
        if (r % 2) { kit[r] = time_side(1, p, reps); blas[r] = time_side(0, p, reps); }
        else { blas[r] = time_side(0, p, reps); kit[r] = time_side(1, p, reps); }
        ratio[r] = kit[r] / blas[r];
    }
    res.kit = median3(kit[0], kit[1], kit[2]);
    res.blas = median3(blas[0], blas[1], blas[2]);
    res.ratio = median3(ratio[0], ratio[1], ratio[2]);
    /* agreement check: the timed calls with beta 1 accumulated into C, so
       recompute both once with beta 0 */
    if (p->beta != 0.0f) { run_kit(p, 0.0f, buf_kit); run_blas(p, 0.0f, buf_blas); }
    res.max_err = 0.0;
    for (i = 0; i < n; i++) {
        /* inputs are uniform in [-1,1): sum |a||b| is about K/4 */
        double e = fabs((double)buf_kit[i] - buf_blas[i]) / (0.25 * p->K);
        if (e > res.max_err) res.max_err = e;
    }
    return res;
}

/* how many other processes want a CPU right now: procs_running of
   /proc/stat (which counts this one too), averaged over half a second;
   the 1-minute load average where there is no /proc */
static double others_running(void) {
    double sum = 0.0;
    int i, n = 0;
    for (i = 0; i < 5; i++) {
        char line[256];
        FILE *f = fopen("/proc/stat", "r");
        if (!f) break;
        while (fgets(line, sizeof line, f))
            if (!strncmp(line, "procs_running ", 14)) { sum += atof(line + 14) - 1.0; n++; }
        fclose(f);
        sleep_s(0.1);
    }
    if (n == 0) {
        double load[1];
        return getloadavg(load, 1) == 1 ? load[0] : 0.0;
    }
    return sum / n;
}

static void warn_if_busy(const char *when) {
    double others = others_running();
    if (others >= 0.5)
        printf("WARNING: %.1f other processes running %s the bench (%ld CPUs): both sides wait for\n"
               "         descheduled threads, so these numbers are unreliable\n",
               others, when, sysconf(_SC_NPROCESSORS_ONLN));
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: bench/matmul [--threads N] [--quick] [--help]\n"
            "  GFLOP/s of trn_sgemm and OpenBLAS cblas_sgemm on GPT-2 124M products.\n"
            "  --threads N   threads for both libraries (default 2)\n"
            "  --quick       only N=256 rows, fewer repetitions\n");
}

static const char *kernel_name(void) {
#if defined(__AVX512F__)
    return "AVX-512, 12x32 tile";
#elif defined(__AVX2__) && defined(__FMA__)
    return "AVX2+FMA, 6x16 tile";
#elif defined(__ARM_NEON) && defined(__aarch64__)
    return "AArch64 NEON, 8x12 tile";
#else
    return "plain C, 4x16 tile";
#endif
}

int main(int argc, char **argv) {
    static const struct { const char *name; int oc, c; } layers[] = {
        {"qkv", 3 * 768, 768}, {"attn.proj", 768, 768}, {"mlp.fc", 4 * 768, 768},
        {"mlp.proj", 768, 4 * 768}, {"lm_head", 50304, 768},
    };
    static const int rows_all[] = {256, 4096};
    product prods[64], small[16];
    int n_prods = 0, n_small = 0, threads = 2, quick = 0, i, r, l;
    size_t max_a = 0, max_b = 0, max_c = 0, n;
    double min_ratio = 1e30, min_small = 1e30, worst_err = 0.0;
    int min_at = 0, min_small_at = 0;
    trn_rng rng;

    for (i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) { usage(stdout); return 0; }
        else if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
            char *end;
            long v = strtol(argv[++i], &end, 10);
            if (*end || v < 1 || v > 1024) {
                fprintf(stderr, "matmul: --threads wants a number 1..1024, got '%s'\n", argv[i]);
                return 2;
            }
            threads = (int)v;
        } else {
            fprintf(stderr, "matmul: unknown argument '%s' (try --help)\n", argv[i]);
            return 2;
        }
    }
    g_threads = threads;

    for (r = 0; r < (quick ? 1 : 2); r++) {
        for (l = 0; l < (int)(sizeof layers / sizeof layers[0]); l++) {
            int N = rows_all[r], OC = layers[l].oc, C = layers[l].c;
            product fwd = {layers[l].name, "fwd", N, 0, 1, N, OC, C, 0.0f, 0};
            product bx = {layers[l].name, "bwd-x", N, 0, 0, N, C, OC, 1.0f, 0};
            product bw = {layers[l].name, "bwd-w", N, 1, 0, OC, C, N, 1.0f, 0};
            prods[n_prods++] = fwd;
            prods[n_prods++] = bx;
            prods[n_prods++] = bw;
        }
    }
    {   /* small products: one attention head (T=256, hs=64) and a few rows */
        product s[] = {
            {"attn head", "QK^T", 256, 0, 1, 256, 256, 64, 0.0f, 1},
            {"attn head", "PV", 256, 0, 0, 256, 64, 256, 0.0f, 1},
            {"attn head", "dK", 256, 1, 0, 256, 64, 256, 1.0f, 1},
            {"4 rows", "fwd", 4, 0, 1, 4, 768, 768, 0.0f, 0},
            {"4 rows", "bwd-x", 4, 0, 0, 4, 768, 3072, 1.0f, 0},
            {"4 rows", "bwd-w", 4, 1, 0, 768, 768, 4, 1.0f, 0},
            {"1 row", "fwd", 1, 0, 1, 1, 3072, 768, 0.0f, 0},
            {"10 classes", "fwd", 64, 0, 1, 64, 10, 784, 0.0f, 0},
            {"tiny", "fwd", 7, 0, 0, 7, 13, 5, 0.0f, 0},
        };
        for (i = 0; i < (int)(sizeof s / sizeof s[0]); i++) small[n_small++] = s[i];
    }
    for (i = 0; i < n_prods + n_small; i++) {
        const product *p = i < n_prods ? &prods[i] : &small[i - n_prods];
        size_t a = (size_t)p->M * p->K, b = (size_t)p->K * p->N, c = (size_t)p->M * p->N;
        max_a = a > max_a ? a : max_a;
        max_b = b > max_b ? b : max_b;
        max_c = c > max_c ? c : max_c;
    }
    buf_a = (float *)malloc(max_a * sizeof(float));
    buf_b = (float *)malloc(max_b * sizeof(float));
    buf_kit = (float *)malloc(max_c * sizeof(float));
    buf_blas = (float *)malloc(max_c * sizeof(float));
    if (!buf_a || !buf_b || !buf_kit || !buf_blas) {
        fprintf(stderr, "matmul: out of memory (%.1f GB needed)\n",
                (double)(max_a + max_b + 2 * max_c) * 4e-9);
        return 1;
    }
    trn_rng_seed(&rng, 1234);
    for (n = 0; n < max_a; n++) buf_a[n] = 2.0f * trn_rng_uniform(&rng) - 1.0f;
    for (n = 0; n < max_b; n++) buf_b[n] = 2.0f * trn_rng_uniform(&rng) - 1.0f;

    printf("trn_sgemm (train.h, %s) vs OpenBLAS cblas_sgemm (%s, core %s)\n", kernel_name(),
           openblas_get_config(), openblas_get_corename());
    printf("threads: %d for both; GFLOP/s = 2*M*N*K / time; %d rounds, the libraries taking turns, each side the median of 3-5 calls after a warm-up; cells and ratios: medians over the rounds\n",
           threads, ROUNDS);
    warn_if_busy("before");
    printf("\n");
    printf("  rows  layer       product      M      N      K     kit  openblas  ratio\n");
    for (i = 0; i < n_prods; i++) {
        const product *p = &prods[i];
        result res = measure(p, quick ? 0.15 : 0.6);
        double ratio = res.ratio;
        if (ratio < min_ratio) { min_ratio = ratio; min_at = i; }
        if (res.max_err > worst_err) worst_err = res.max_err;
        printf("  %4d  %-10s  %-7s %6d %6d %6d  %6.1f  %8.1f  %5.2f\n", p->rows, p->layer, p->what,
               p->M, p->N, p->K, res.kit, res.blas, ratio);
        fflush(stdout);
    }
    printf("\nmin ratio kit/openblas: %.2f (rows %d, %s %s)\n", min_ratio, prods[min_at].rows,
           prods[min_at].layer, prods[min_at].what);

    printf("\nsmall products (information; the kit uses one thread below ~4M FMAs of work):\n");
    printf("  what        product      M      N      K  thr     kit  openblas  ratio\n");
    for (i = 0; i < n_small; i++) {
        const product *p = &small[i];
        result res = measure(p, 0.05);
        double ratio = res.ratio;
        if (ratio < min_small) { min_small = ratio; min_small_at = i; }
        if (res.max_err > worst_err) worst_err = res.max_err;
        printf("  %-10s  %-7s %6d %6d %6d  %3d  %6.1f  %8.1f  %5.2f\n", p->layer, p->what, p->M, p->N,
               p->K, p->one_thread ? 1 : threads, res.kit, res.blas, ratio);
        fflush(stdout);
    }
    printf("\nmin ratio on small products: %.2f (%s %s)\n", min_small, small[min_small_at].layer,
           small[min_small_at].what);
    printf("largest |kit - openblas| / (K/4): %.2g %s\n", worst_err,
           worst_err < 1e-5 ? "(agree)" : "(DISAGREE: check trn_sgemm)");
    warn_if_busy("after");
    free(buf_a); free(buf_b); free(buf_kit); free(buf_blas);
    return worst_err < 1e-5 ? 0 : 1;
}
