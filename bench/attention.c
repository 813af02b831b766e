// attention - the fused (flash-style) attention of train.h next to the
// materialized reference, forward + backward, at GPT-2 124M's shapes
// (12 heads of 64 channels, causal), measured side by side in one run.
//
//   bench/attention               T = 1024 (B = 1, 2), T = 256 (B = 1, 8), and
//                                 T = 64, B = 4 (the shape bench/gpt2 trains)
//   bench/attention --quick       fewer repetitions
//   bench/attention --reps N      timed repetitions per side (default 7)
//   bench/attention --threads N   OpenMP threads for both (default: all)
//
// For each shape both pairs get the same qkv (B,T,3C) and dout (B,T,C):
//   materialized  trn_attention_forward  -> out, att (B,NH,T,T)
//                 trn_attention_backward -> dqkv, with a (B,NH,T,T) scratch
//   fused         trn_flash_attention_forward  -> out, lse (B,NH,T)
//                 trn_flash_attention_backward -> dqkv
// One warm-up call each, then the timed repetitions alternate between the
// two (materialized, fused, materialized, ...) so that load from other
// processes falls on both alike; each cell is the median. "speedup" is
// materialized time / fused time (above 1: the fused one is faster). The
// last columns are what each keeps per layer for backward beside out, and
// the largest |difference| of their outputs and input gradients.
// The machine is named in the output; compare runs on the same machine.
#define TRAIN_IMPLEMENTATION
#include "train.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
static double median(double *t, int n) {
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

static float *alloc_floats(size_t n) {
    float *p = (float *)trn_alloc(sizeof(float) * n, TRN_KIND_TEMP);
    if (!p) {
        fprintf(stderr, "attention: cannot allocate %zu floats: %s\n", n, trn_error_reason());
        exit(1);
    }
    return p;
}

static double maxdiff(const float *a, const float *b, size_t n) {
    double d = 0.0;
    size_t i;
    for (i = 0; i < n; i++) {
        double e = fabs((double)a[i] - (double)b[i]);
        if (!(e <= d)) d = e;
    }
    return d;
}

/* the CPU's model name from /proc/cpuinfo, or "unknown CPU" */
static void cpu_name(char *buf, size_t n) {
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[256];
    snprintf(buf, n, "unknown CPU");
    if (!f) return;
    while (fgets(line, sizeof line, f)) {
        char *c = strchr(line, ':');
        if (strncmp(line, "model name", 10) == 0 && c) {
            snprintf(buf, n, "%s", c + 2);
            buf[strcspn(buf, "\n")] = 0;
            break;
        }
    }
    fclose(f);
}

static void run(int B, int T, int NH, int hs, int causal, int reps) {
    int C = NH * hs, r, side;
    size_t nqkv = (size_t)B * T * 3 * C, no = (size_t)B * T * C, natt = (size_t)B * NH * T * T;
    float *qkv = alloc_floats(nqkv), *dout = alloc_floats(no);
    float *out_m = alloc_floats(no), *out_f = alloc_floats(no), *dq_m = alloc_floats(nqkv);
    float *dq_f = alloc_floats(nqkv), *att = alloc_floats(natt), *scratch = alloc_floats(natt);
    float *lse = alloc_floats((size_t)B * NH * T);
    double *tf[2], *tb[2], fwd[2], bwd[2], tot[2], dout_diff, dq_diff;
    trn_rng rng;
    size_t i;
    trn_rng_seed(&rng, 7);
    for (i = 0; i < nqkv; i++) qkv[i] = trn_rng_normal(&rng);
    for (i = 0; i < no; i++) dout[i] = trn_rng_normal(&rng);
    for (side = 0; side < 2; side++) {
        tf[side] = (double *)malloc(sizeof(double) * (size_t)(reps + 1));
        tb[side] = (double *)malloc(sizeof(double) * (size_t)(reps + 1));
    }
    /* rep 0 is the warm-up (and the correctness check); 1..reps are timed */
    for (r = 0; r <= reps; r++)
        for (side = 0; side < 2; side++) {
            double t0, t1, t2;
            memset(side ? dq_f : dq_m, 0, sizeof(float) * nqkv);
            t0 = now_s();
            if (side == 0) trn_attention_forward(out_m, att, qkv, B, T, NH, NH, hs, causal);
            else trn_flash_attention_forward(out_f, lse, qkv, B, T, NH, NH, hs, causal);
            t1 = now_s();
            if (side == 0) trn_attention_backward(dq_m, scratch, dout, qkv, att, B, T, NH, NH, hs, causal);
            else trn_flash_attention_backward(dq_f, dout, qkv, out_f, lse, B, T, NH, NH, hs, causal);
            t2 = now_s();
            tf[side][r] = t1 - t0;
            tb[side][r] = t2 - t1;
        }
    dout_diff = maxdiff(out_f, out_m, no);
    dq_diff = maxdiff(dq_f, dq_m, nqkv);
    for (side = 0; side < 2; side++) {
        double *sum = (double *)malloc(sizeof(double) * (size_t)reps);
        for (r = 0; r < reps; r++) sum[r] = tf[side][r + 1] + tb[side][r + 1];
        tot[side] = 1e3 * median(sum, reps);
        fwd[side] = 1e3 * median(tf[side] + 1, reps);
        bwd[side] = 1e3 * median(tb[side] + 1, reps);
        free(sum);
    }
    printf("%2d %5d %-6s | %8.1f %8.1f %8.1f | %8.1f %8.1f %8.1f | %6.2fx | %8.1f %7.2f | %.1e %.1e\n", B, T,
           causal ? "causal" : "full", fwd[0], bwd[0], tot[0], fwd[1], bwd[1], tot[1], tot[0] / tot[1],
           2.0 * natt * sizeof(float) / 1048576.0, (double)B * NH * T * sizeof(float) / 1048576.0, dout_diff,
           dq_diff);
    fflush(stdout);
    for (side = 0; side < 2; side++) { free(tf[side]); free(tb[side]); }
    trn_free(qkv); trn_free(dout); trn_free(out_m); trn_free(out_f); trn_free(dq_m); trn_free(dq_f);
    trn_free(att); trn_free(scratch); trn_free(lse);
}

int main(int argc, char **argv) {
    int reps = 7, threads = 0, i;
    char cpu[128];
    for (i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) reps = 3;
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: bench/attention [--quick] [--reps N] [--threads N]\n"
                   "fused vs materialized attention, forward + backward, GPT-2 124M shapes (NH=12, hs=64)\n");
            return 0;
        } else {
            fprintf(stderr, "attention: unknown argument '%s' (try --help)\n", argv[i]);
            return 2;
        }
    }
    if (reps < 1) {
        fprintf(stderr, "attention: --reps must be at least 1\n");
        return 2;
    }
    trn_set_threads(threads);
    cpu_name(cpu, sizeof cpu);
    printf("CPU: %s, %d threads; NH=12 hs=64; ms are medians of %d reps after a warm-up\n", cpu,
           trn_get_threads(), reps);
    printf("         shape |     materialized (ms)     |        fused (ms)         |        | kept for bwd (MiB)| max|diff|\n");
    printf(" B     T mask   |  forward backward    total |  forward backward    total | speedup|  att+scr     lse | out     dqkv\n");
    run(1, 1024, 12, 64, 1, reps);
    run(2, 1024, 12, 64, 1, reps);
    run(1, 1024, 12, 64, 0, reps);
    run(1, 256, 12, 64, 1, reps);
    run(8, 256, 12, 64, 1, reps);
    run(4, 64, 12, 64, 1, reps);
    return 0;
}
