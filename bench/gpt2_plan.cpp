// gpt2_plan - where the time of a GPT-2 training step on an H100 goes,
// computed on the CPU: the time ledger (train_cuda.h's >>sites) of one step
// of GPT-2 124M at B=16, T=1024, bf16 by default.
//
//   ./build.sh bench && ./bench/gpt2_plan              bf16
//   ./bench/gpt2_plan --precision tf32                 fp32 values, TF32 matmuls
//   ./bench/gpt2_plan --precision fp32 --batch 8
//
// The step runs on train_cuda.h's real code path through the CUDA-on-CPU
// harness (tests/cuda_on_cpu.h) in dry-run mode: every allocation, launch
// and cuBLAS call happens and is checked, but no kernel computes (the values
// are garbage, the counts are exact), so the whole step takes a second or
// two here. The first step sizes the arenas; the second is the one counted,
// as in a training run. Each launch site states the bytes and FLOPs its
// work must move and do; bench/gpt2_sites.h turns them into floors at the
// H100's measured ceilings, an expected efficiency per kernel (with its
// reason) and a predicted time, and sums them. The last line:
//   plan: <floor> ms floor, <predicted> ms/step predicted, <tokens/s> tokens/s,
//         <n> launches, classifier <x>x its floor
// (one line). --csv FILE writes the rows as CSV too. The same table with
// measured times: bench/gpt2_cuda --profile on a GPU.
//
// build: -Wno-maybe-uninitialized
// requires: test -f examples/gpt2.c
#include "tests/cuda_on_cpu.h"
#define TRN_USE_CUDA
#define TRAIN_CUDA_IMPLEMENTATION
#define GPT2_NO_MAIN
#include "examples/gpt2.c"
#include "bench/gpt2_sites.h"

#include <vector>

typedef struct plan_result {
    plan_sums s;
    std::vector<trn_cuda_site_row> rows;
    double tokens_per_s;
    int B, T, Vp, C;
    // cuBLASLt's host work in each of the two steps (the harness counts it):
    // heuristic queries and descriptors created; and the plans kept
    long long lt_heuristics[2], lt_descs[2];
    int lt_plans;
} plan_result;

// GPT-2 124M, one counted step (after one that sizes the arenas) at the
// given precision; prints the table when f is not NULL
static plan_result plan_run(trn_cuda_precision prec, int B, int T, FILE *f) {
    plan_result r;
    const gpt2_config cfg = find_preset("gpt2")->cfg;
    if (trn_cuda_set_precision(prec) != TRN_OK) trn_fatal("precision: %s", trn_error_reason());
    gpt2 g;
    if (gpt2_create(&g, &cfg, trn_cuda_backend()) != TRN_OK) trn_fatal("gpt2_create: %s", trn_error_reason());
    gpt2_init_weights(&g, 1);
    std::vector<int> x((size_t)B * T), y((size_t)B * T);
    for (int i = 0; i < B * T; i++) { x[(size_t)i] = (i * 7919) % cfg.vocab_size; y[(size_t)i] = (i * 104729 + 1) % cfg.vocab_size; }
    trn_adamw_desc d;
    memset(&d, 0, sizeof d);
    trn_adamw opt;
    trn_adamw_init(&opt, &d);
    long long h0 = cuemu::lt_heuristics, d0 = cuemu::lt_descs;
    plan_gpt2_step(&g, &opt, x.data(), y.data(), B, T); // sizes the arenas
    long long h1 = cuemu::lt_heuristics, d1 = cuemu::lt_descs;
    trn_cuda_sites_start(0);
    plan_gpt2_step(&g, &opt, x.data(), y.data(), B, T);
    r.lt_heuristics[0] = h1 - h0; r.lt_heuristics[1] = cuemu::lt_heuristics - h1;
    r.lt_descs[0] = d1 - d0; r.lt_descs[1] = cuemu::lt_descs - d1;
    r.lt_plans = trn__lt.n;
    const trn_cuda_site_row *rows;
    int n = trn_cuda_sites_read(&rows);
    r.rows.assign(rows, rows + n);
    r.B = B; r.T = T; r.C = cfg.n_embd; r.Vp = cfg.padded_vocab;
    if (f) fprintf(f, "GPT-2 124M, B=%d, T=%d, %s, one training step (forward, loss, backward, clip, AdamW) on an H100:\n",
                   B, T, trn_cuda_precision_name(prec));
    FILE *out = f ? f : fopen("/dev/null", "w"); // the sums without the table
    if (!out) trn_fatal("gpt2_plan: cannot open /dev/null");
    r.s = plan_print(out, rows, n, prec, 0);
    if (!f) fclose(out);
    plan_ceilings c = plan_ceilings_for(prec);
    r.s.classifier_floor_ms = plan_classifier_floor_ms((double)B * T, cfg.n_embd, cfg.padded_vocab, prec == TRN_CUDA_BF16 ? 2 : 4, &c);
    r.tokens_per_s = (double)B * T / (r.s.predicted_ms / 1e3);
    trn_adamw_free(&opt);
    gpt2_free(&g);
    return r;
}

static void plan_line(FILE *f, const plan_result *r) {
    fprintf(f, "plan: %.2f ms floor, %.2f ms/step predicted, %.0f tokens/s, %lld launches, classifier %.2fx its floor\n",
            r->s.floor_ms, r->s.predicted_ms, r->tokens_per_s, r->s.launches,
            r->s.classifier_ms / r->s.classifier_floor_ms);
}

#ifndef GPT2_PLAN_NO_MAIN
static void plan_usage(FILE *f) {
    fprintf(f, "usage: bench/gpt2_plan [--precision bf16|tf32|fp32] [--batch 16] [--seq 1024] [--csv FILE]\n"
               "  the time ledger of one GPT-2 124M training step on an H100, computed on the CPU\n");
}

int main(int argc, char **argv) {
    int B = 16, T = 1024, prec = TRN_CUDA_BF16;
    const char *csv = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { plan_usage(stdout); return 0; }
        if (!v) { fprintf(stderr, "gpt2_plan: %s needs a value (or unknown flag)\n", a); plan_usage(stderr); return 2; }
        if (!strcmp(a, "--precision")) {
            if ((prec = trn_cuda_precision_parse(v)) < 0) { fprintf(stderr, "gpt2_plan: --precision: fp32, tf32 or bf16, not '%s'\n", v); return 2; }
        } else if (!strcmp(a, "--csv")) {
            csv = v;
        } else if (!strcmp(a, "--batch")) {
            if ((B = atoi(v)) < 1 || B > 64) { fprintf(stderr, "gpt2_plan: --batch: 1..64, not '%s'\n", v); return 2; }
        } else if (!strcmp(a, "--seq")) {
            if ((T = atoi(v)) < 1 || T > 1024) { fprintf(stderr, "gpt2_plan: --seq: 1..1024, not '%s'\n", v); return 2; }
        } else { fprintf(stderr, "gpt2_plan: unknown flag '%s'\n", a); plan_usage(stderr); return 2; }
        i++;
    }
    cuemu::config().dry_run = 1;
    cuemu::config().total_mem = (size_t)80 << 30; // an H100 80GB
    trn_set_threads(1);
    if (trn_cuda_init(0) != TRN_OK) { fprintf(stderr, "gpt2_plan: cuda init: %s\n", trn_error_reason()); return 1; }
    plan_result r = plan_run((trn_cuda_precision)prec, B, T, stdout);
    printf("classifier: %.3f GB, %lld launches, %.3f ms predicted; its floor done the best known way %.3f ms\n",
           r.s.classifier_bytes / 1e9, r.s.classifier_launches, r.s.classifier_ms, r.s.classifier_floor_ms);
    printf("cuBLASLt: %d plans; heuristic queries %lld in the first step, %lld in the second\n", r.lt_plans,
           r.lt_heuristics[0], r.lt_heuristics[1]);
    plan_line(stdout, &r);
    if (csv && plan_csv(csv, r.rows.data(), (int)r.rows.size(), (trn_cuda_precision)prec) != 0) {
        fprintf(stderr, "gpt2_plan: --csv: cannot write '%s'\n", csv);
        return 1;
    }
    trn_cuda_shutdown();
    return cuemu::errors() ? 1 : 0;
}
#endif
