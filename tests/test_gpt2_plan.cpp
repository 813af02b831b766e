// build: -O2 -g1 -Wno-maybe-uninitialized
// requires: test -f examples/gpt2.c
/* tests/test_gpt2_plan.cpp - the time ledger (train_cuda.h's >>sites) of
   one GPT-2 124M step at B=16, T=1024 in bf16, counted on the real code
   path through the harness's dry run (bench/gpt2_plan's plan_run), held to
   the design:
     1. every launch of the step has a site line (no "(no site)" rows), and
        the sites stay off outside trn_cuda_sites_start/read;
     2. the classifier's bytes and launches are what its design moves and
        makes (DESIGN below, derived in one place);
     3. the step's launches are the design's count;
     4. bench/gpt2_plan's last line has its documented form;
     5. cuBLASLt is asked once per distinct problem: one heuristic query
        and one descriptor per plan in the first step, none in the second
        (train_cuda.h's >>lt-plans), and every bf16 GEMM of the step is
        one of D_LT_PLANS problems.
   When the classifier or a launcher changes (issue 23's items 2-4), the
   DESIGN block changes with it, and nothing else here. */
#define TRN_CUDA_FLASH_HS(X) X(64) /* bf16 attention compiled for GPT-2 124M's head size only (train_cuda.h) */
#define GPT2_PLAN_NO_MAIN
#include "bench/gpt2_plan.cpp"
#include "tests/check.h"

/* ---- DESIGN: what the step must launch and the classifier must move ------
   GPT-2 124M: L = 12 layers, C = 768, Vp = 50304; N = B*T = 16384 rows,
   E = 2 bytes per bf16 activation.
   The classifier since issue 23 (train.h trn_linear_cross_entropy,
   "chunks", with train_cuda.h's 400 MiB chunk and fused cross-entropy):
   at most 400 MiB / (E Vp) = 4169 rows, so K = ceil(N / 4169) = 4 chunks,
   split evenly: R = 4096 rows. Per chunk: the logits GEMM (reads W:
   E Vp C), the fused cross-entropy (reads the logits, writes their
   gradient over them), the dinp GEMM (reads W again; WRITES dx's rows,
   beta 0) and the dW GEMM (chunk 0 WRITES the fp32 dW, 4 Vp C; the others
   read and write it, 8 Vp C): 4 launches. Once: the targets' upload, and
   in backward one convert (dW WRITTEN into the LM head's gradient, which
   is known zero after trn_zero_grad: fp32 read, written); dx needs none
   (x has no gradient yet: the saved dx becomes it).
   Bytes:
     W per chunk              K 2E Vp C
     dW                       (8K - 4) Vp C
     the (n, Vp) logits       5 E N Vp   (GEMM writes; the fused kernel
                                          reads and writes; dinp and dW read)
     the (n, C) rows          3 E N C    (x read by the logits and dW GEMMs,
                                          dx written by dinp)
     once                     8 Vp C     (convert dW)
                            + 12 N       (targets 4 twice (upload, read by
                                          the fused kernel) + losses 4)
   Launches of the step: per layer 22 (forward: a layernorm, the residual
   add fused into the second layernorm (>>addln), 3 GEMMs, the fused
   matmul+GELU, attention, 1 residual add = 8; backward: 2 layernorms x 1
   launch (dx, and dw and db from the same loads: each block's partial
   row, summed by the last block in the same launch), 1 copy (the block's last residual
   add hands its gradient on; the fused one's layernorm writes it in its
   dx pass), the matmul+dGELU, 3 dinp and 4 dW GEMMs (each dW GEMM also
   WRITES its bias gradient in its BGRADB epilogue: the parameters'
   gradients are known zero after trn_zero_grad, so no column-sum
   launches), attention's 3 (FlashAttention-2: D = rowsum(dO O), the
   key-block kernel for dK and dV, the query-block pass for dQ; each
   stores its outputs, so none needs a zero pass) = 14, and no zero: the 3 dinp
   GEMMs write their fresh
   gradients with beta 0, and attention WRITES its fresh dqkv
   (flash_attention_backward_ex), where they were zeroed and added to); outside
   the layers 19 (ids upload 3, embedding 2+2 (backward: the tokens'
   rows, and the positions' summed over the batch first), its add, the final
   layernorm 1 + 1 (its backward WRITES the fresh gradient of its input,
   no zero pass), a copy, 2 zeros, the loss mean, 2 downloads, the
   gradient norm 2, AdamW 1); and the classifier's 1 + 4 K + 1. */
static const double D_N = 16384, D_C = 768, D_VP = 50304, D_E = 2;
static const int D_L = 12, D_RMAX = (int)((400.0 * 1048576) / (2 * 50304)), D_K = (16384 + D_RMAX - 1) / D_RMAX,
                 D_R = (16384 + D_K - 1) / D_K;
static double design_classifier_bytes(void) {
    return D_K * 2 * D_E * D_VP * D_C + (8.0 * D_K - 4) * D_VP * D_C + 5 * D_E * D_N * D_VP + 3 * D_E * D_N * D_C +
           8 * D_VP * D_C + 12 * D_N;
}
static const long long D_CLASSIFIER_LAUNCHES = 1 + 4 * D_K + 1;
static const long long D_STEP_LAUNCHES = D_L * 22 + 19 + D_CLASSIFIER_LAUNCHES;
/* the distinct cuBLASLt problems of the step: forward qkv, attention proj,
   fc+GELU, fc proj (4); backward dinp of qkv, proj, fc proj and the
   fc+dGELU (4), dW of the four with BGRADB (4); the classifier's logits, dinp and dW at
   4096 rows (3) */
static const int D_LT_PLANS = 4 + 4 + 4 + 3;
/* ---- end of DESIGN ------------------------------------------------------- */

int main(void) {
    cuemu::config().dry_run = 1;
    cuemu::config().total_mem = (size_t)80 << 30;
    trn_set_threads(1);
    if (trn_cuda_init(0) != TRN_OK) { printf("cuda init: %s\n", trn_error_reason()); return 1; }
    plan_result r = plan_run(TRN_CUDA_BF16, 16, 1024, NULL);
    /* 1 */
    int unsited = 0;
    for (size_t i = 0; i < r.rows.size(); i++)
        if (r.rows[i].scope && !strcmp(r.rows[i].scope, "(no site)")) {
            printf("no site line: %s (%lld launches)\n", r.rows[i].name, r.rows[i].launches);
            unsited++;
        }
    CHECK(unsited == 0, "%d kernels of the step are launched with no site line\n", unsited);
    {
        const trn_cuda_site_row *rows;
        trn_cuda_sites_start(0);
        trn_cuda_sites_read(&rows); /* stops counting */
        float *p = (float *)trn_cuda_backend()->alloc(64, TRN_KIND_TEMP);
        trn_cuda_backend()->zero(p, 64);
        trn_cuda_backend()->free(p);
        CHECK(trn_cuda_sites_read(&rows) == 0, "the sites kept counting after trn_cuda_sites_read\n");
    }
    /* 2 */
    double want = design_classifier_bytes();
    printf("classifier: %.4f GB, %lld launches (design: %.4f GB, %lld launches; %d chunks of %d rows)\n",
           r.s.classifier_bytes / 1e9, r.s.classifier_launches, want / 1e9, D_CLASSIFIER_LAUNCHES, D_K, D_R);
    CHECK(fabs(r.s.classifier_bytes - want) <= 1e-6 * want, "classifier bytes %.6f GB, the design says %.6f GB\n",
          r.s.classifier_bytes / 1e9, want / 1e9);
    CHECK(r.s.classifier_launches == D_CLASSIFIER_LAUNCHES, "classifier launches %lld, the design says %lld\n",
          r.s.classifier_launches, D_CLASSIFIER_LAUNCHES);
    /* 3 */
    printf("step: %lld launches (design %lld), %.3f GB, %.1f GFLOP, floor %.2f ms, predicted %.2f ms\n", r.s.launches,
           D_STEP_LAUNCHES, r.s.bytes / 1e9, r.s.flops / 1e9, r.s.floor_ms, r.s.predicted_ms);
    CHECK(r.s.launches == D_STEP_LAUNCHES, "the step makes %lld launches, the design says %lld\n", r.s.launches,
          D_STEP_LAUNCHES);
    /* the FLOPs of the matmuls are 6 x matmul parameters x tokens (the LM head once), as bench/gpt2 counts them */
    double mm = 0;
    for (size_t i = 0; i < r.rows.size(); i++)
        if (r.rows[i].m && strncmp(r.rows[i].name, "flash", 5)) mm += r.rows[i].flops;
    const gpt2_config cfg = find_preset("gpt2")->cfg;
    double want_mm = 6.0 * gpt2_matmul_params(&cfg) * D_N;
    CHECK(fabs(mm - want_mm) <= 1e-9 * want_mm, "GEMM FLOPs %.6g, 6 x matmul params x tokens = %.6g\n", mm, want_mm);
    /* 4 */
    char line[256];
    FILE *f = tmpfile();
    CHECK(f != NULL, "tmpfile\n");
    if (f) {
        plan_line(f, &r);
        rewind(f);
        if (!fgets(line, sizeof line, f)) line[0] = 0;
        fclose(f);
        double a, b, c, x;
        long long n;
        int got = sscanf(line, "plan: %lf ms floor, %lf ms/step predicted, %lf tokens/s, %lld launches, classifier %lfx its floor",
                         &a, &b, &c, &n, &x);
        printf("%s", line);
        CHECK(got == 5 && n == D_STEP_LAUNCHES && b >= a && x > 1.0, "the plan line: %s", line);
    }
    /* 5 */
    printf("cuBLASLt: %d plans; heuristic queries %lld then %lld, descriptors %lld then %lld\n", r.lt_plans,
           r.lt_heuristics[0], r.lt_heuristics[1], r.lt_descs[0], r.lt_descs[1]);
    CHECK(r.lt_plans == D_LT_PLANS && r.lt_heuristics[0] == D_LT_PLANS && r.lt_descs[0] == D_LT_PLANS,
          "first step: %d plans, %lld heuristic queries, %lld descriptors; the design: %d of each\n", r.lt_plans,
          r.lt_heuristics[0], r.lt_descs[0], D_LT_PLANS);
    CHECK(r.lt_heuristics[1] == 0 && r.lt_descs[1] == 0, "second step: %lld heuristic queries, %lld descriptors\n",
          r.lt_heuristics[1], r.lt_descs[1]);
    CHECK(cuemu::errors() == 0, "the harness reported %ld errors\n", cuemu::errors());
    trn_cuda_shutdown();
    return check_summary();
}
