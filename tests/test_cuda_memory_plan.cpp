// build: -O2 -g1 -Wno-maybe-uninitialized
// requires: test -f examples/gpt2.c
/* tests/test_cuda_memory_plan.cpp - the device memory of GPT-2 124M at
   B=16, T=1024 on the CUDA backend, in fp32/TF32 and in bf16, measured by
   the ledger on the real code path with the harness in dry-run mode
   (cuda_on_cpu.h's config().dry_run: every cudaMalloc, copy and launch
   happens and is checked, but kernels and GEMMs do not compute, so a step
   that would take hours here takes a second; the values are garbage, the
   bytes are exact).

   Checks:
     1. fp32/TF32 (fused attention): the ledger's peak of the kit's kinds is
        what the H100's ledger showed on 2026-11-25 (13.631 GB,
        docs/gpu_h100_2026-11-25.md) less exactly what changed since, within
        0.1% (the dry run is the GPU run's allocation pattern): the two
        (B,T,C) per layer that the residual adds no longer keep
        (trn_add_inplace), and 5 (B,T,C) of activation gradients at the
        peak (11 then, 6 now: trn_mlp writes d(fc out) without a d(gelu
        out), and an add hands its gradient on instead of copying it).
        Since issue 23 the classifier's chunk holds 2048 rows of fp32
        logits (train_cuda.h's 400 MiB; their gradient is written over
        them), not two buffers of 166 rows: its dx (N,C), dW (Vp,C) and
        chunk, 0.617 GB, are now the gradients' peak instead of the 6.
     2. bf16: weights 4P (fp32 master) + 2P (the bf16 copy, its own ledger
        line) + grads 4P + AdamW 8P; activations and activation gradients
        at most 0.55 of fp32's (bf16 values, fp32 statistics).
     3. bf16, with --recompute off: the kit's peak plus its scratch (the
        backend's TEMP: FlashAttention-2's D, (B,NH,T) fp32 = 0.75 MiB (its
        fp32 dQ partials, ~152 MB, are gone since dQ has its own pass: the
        H100's ledger showed 144.8 MiB of it on 2026-11-27, then 0.75), and
        the column sums' partials and counters) plus the CUDA runtime the
        H100 showed (context + cuBLAS workspace: 0.66 GB in the same report)
        is at most 8 GiB, issue 14's memory target. */
#define TRN_CUDA_FLASH_HS(X) X(64) /* bf16 attention compiled for GPT-2 124M's head size only (train_cuda.h) */
#include "tests/cuda_on_cpu.h"
#define TRN_USE_CUDA
#define TRAIN_CUDA_IMPLEMENTATION
#define GPT2_NO_MAIN
#include "examples/gpt2.c"
#include "tests/check.h"

#include <vector>

static const double GIB = 1073741824.0;
static const trn_kind KIT[] = {TRN_KIND_WEIGHTS, TRN_KIND_WEIGHTS_BF16, TRN_KIND_GRADS, TRN_KIND_OPTIM,
                               TRN_KIND_ACTIVATIONS, TRN_KIND_ACT_GRADS};

typedef struct plan {
    double kit, temp, by_kind[TRN_KIND_COUNT];
    size_t P;
} plan;

/* two training steps (the first sizes the arenas, the second runs inside
   them), as bench/gpt2_cuda runs them; peaks of this model only */
static plan measure(trn_cuda_precision prec) {
    plan r;
    memset(&r, 0, sizeof r);
    const gpt2_config cfg = find_preset("gpt2")->cfg;
    const int B = 16, T = 1024;
    CHECK(trn_cuda_set_precision(prec) == TRN_OK, "precision: %s\n", trn_error_reason());
    trn_ledger_reset_peak();
    gpt2 g;
    CHECK(gpt2_create(&g, &cfg, trn_cuda_backend()) == TRN_OK, "gpt2_create: %s\n", trn_error_reason());
    gpt2_init_weights(&g, 1);
    r.P = g.m.n_floats;
    std::vector<int> x((size_t)B * T), y((size_t)B * T);
    for (int i = 0; i < B * T; i++) { x[(size_t)i] = (i * 7919) % cfg.vocab_size; y[(size_t)i] = (i * 104729 + 1) % cfg.vocab_size; }
    trn_adamw_desc d;
    memset(&d, 0, sizeof d);
    trn_adamw opt;
    trn_adamw_init(&opt, &d);
    for (int s = 0; s < 2; s++) {
        float loss, norm;
        trn_zero_grad(&g.m);
        trn_reset(&g.m);
        trn_tensor *l = gpt2_loss(&g, x.data(), y.data(), B, T);
        trn_item_async(&g.m, l, &loss);
        trn_backward(&g.m, l);
        trn_clip_grad_norm_async(&g.m, 1.0f, &norm);
        trn_adamw_step(&opt, &g.m, 1e-4f);
        trn_sync(&g.m);
    }
    for (size_t k = 0; k < sizeof KIT / sizeof KIT[0]; k++) {
        r.by_kind[KIT[k]] = (double)trn_ledger_peak(TRN_DEVICE, KIT[k]);
        r.kit += r.by_kind[KIT[k]];
    }
    printf("%s: ", trn_cuda_precision_name(prec));
    for (size_t k = 0; k < sizeof KIT / sizeof KIT[0]; k++)
        printf("%s %.3f  ", trn_kind_name(KIT[k]), r.by_kind[KIT[k]] / GIB);
    r.temp = (double)trn_ledger_peak(TRN_DEVICE, TRN_KIND_TEMP); /* scratch: not a kind of the kit's own */
    printf("| kit %.3f GiB, scratch %.3f GiB\n", r.kit / GIB, r.temp / GIB);
    trn_adamw_free(&opt);
    gpt2_free(&g);
    return r;
}

int main(void) {
    cuemu::config().dry_run = 1;
    cuemu::config().total_mem = (size_t)80 << 30; /* an H100 80GB */
    trn_set_threads(1);
    if (trn_cuda_init(0) != TRN_OK) { printf("cuda init: %s\n", trn_error_reason()); return 1; }
    printf("GPT-2 124M, B=16, T=1024, fused attention, device ledger peaks (GiB), kernels not run:\n");
    plan f = measure(TRN_CUDA_TF32);
    plan h = measure(TRN_CUDA_BF16);
    /* 1 */
    double U = 16.0 * 1024 * 768 * 4, inplace = 2 * U * 12, grads = 5 * U;
    /* the classifier's peak: dx (N,C) + dW (Vp,C) + one chunk (R,Vp) + lse (R), fp32; R = 16384 / ceil(16384 /
       floor(400 MiB / (4 Vp))) = 2048 */
    double Vp = 50304, R = 2048, cls = U + 4 * Vp * 768 + 4 * R * Vp + 4 * R;
    double h100 = 13.631e9 - inplace - grads - 6 * U + fmax(6 * U, cls);
    printf("fp32: %.3f GB; the H100's ledger 13.631 GB less %.3f GB of in-place residuals and %.3f GB of activation "
           "gradients, with the classifier's %.3f GB as the gradients' peak for the 6 (B,T,C) = %.3f GB\n",
           f.kit / 1e9, inplace / 1e9, grads / 1e9, cls / 1e9, h100 / 1e9);
    CHECK(fabs(f.kit - h100) <= 0.001 * h100, "fp32: %.3f GB, expected %.3f\n", f.kit / 1e9, h100 / 1e9);
    /* 2 */
    double P = (double)h.P;
    CHECK(h.by_kind[TRN_KIND_WEIGHTS] == 4 * P && h.by_kind[TRN_KIND_WEIGHTS_BF16] == 2 * P &&
              h.by_kind[TRN_KIND_GRADS] == 4 * P + 8 /* + the norm and clip factor */ &&
              h.by_kind[TRN_KIND_OPTIM] == 8 * P,
          "bf16 state: weights %.0f, bf16 copy %.0f, grads %.0f, AdamW %.0f bytes for %.0f parameters\n",
          h.by_kind[TRN_KIND_WEIGHTS], h.by_kind[TRN_KIND_WEIGHTS_BF16], h.by_kind[TRN_KIND_GRADS],
          h.by_kind[TRN_KIND_OPTIM], P);
    CHECK(f.by_kind[TRN_KIND_WEIGHTS_BF16] == 0, "fp32 has a bf16 copy\n");
    double af = f.by_kind[TRN_KIND_ACTIVATIONS] + f.by_kind[TRN_KIND_ACT_GRADS];
    double ah = h.by_kind[TRN_KIND_ACTIVATIONS] + h.by_kind[TRN_KIND_ACT_GRADS];
    printf("activations + their gradients: fp32 %.3f GiB, bf16 %.3f GiB (%.2f)\n", af / GIB, ah / GIB, ah / af);
    CHECK(ah <= 0.55 * af, "bf16 activations are %.2f of fp32's\n", ah / af);
    /* 3 */
    const double runtime = 626.8 * 1048576; /* H100, 2026-11-25: CUDA context + cuBLAS workspace */
    printf("bf16 device total: kit %.3f GiB + scratch %.3f GiB + runtime %.2f GiB = %.3f GiB (target <= 8 GiB)\n",
           h.kit / GIB, h.temp / GIB, runtime / GIB, (h.kit + h.temp + runtime) / GIB);
    CHECK(h.temp >= 16.0 * 12 * 1024 * 4 && h.temp < 0.01 * GIB,
          "bf16 scratch %.4f GiB: want FlashAttention-2's D (0.75 MiB), no dQ partials\n", h.temp / GIB);
    CHECK(h.kit + h.temp + runtime <= 8.0 * GIB, "bf16 needs %.3f GiB\n", (h.kit + h.temp + runtime) / GIB);
    CHECK(cuemu::errors() == 0, "the harness reported %ld errors\n", cuemu::errors());
    trn_cuda_shutdown();
    return check_summary();
}
