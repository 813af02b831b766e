/* bench/gpt2_sites.h - the time ledger of a GPT-2 training step as a table
   (train_cuda.h's >>sites): one row per launch site, its launches, the
   bytes and FLOPs it must move and do, its FLOOR at an H100's measured
   ceilings, the efficiency expected of that kernel and why, the predicted
   time; on a GPU also the measured time and floor / measured.
   Used by bench/gpt2_plan (the table on the CPU, through the harness's dry
   run), bench/gpt2_cuda --profile (the same table, measured) and
   tests/test_gpt2_plan.cpp. Include it after examples/gpt2.c.

   The ceilings (H100 80GB HBM3, what was measured on this project's lent
   machines; .library notes of 2026-11-13 and docs/gpu_h100_2026-11-2*.md):
     copy       3.0 TB/s, a device-to-device copy counting bytes read plus
                written (measured, 2026-11-13)
     bf16 GEMM  790 TFLOP/s: an 8192^3 bf16 product on random data ran at
                798 (2026-11-13); 790 leaves the run-to-run spread (769 to
                798 seen on the same chip family)
     tf32 GEMM  395 TFLOP/s: NOT measured. The datasheet's dense TF32 rate
                (494.7, the figure docs/gpu_h100_2026-11-24.md's MFU uses)
                times the measured/datasheet ratio of bf16 (790 / 989.4 =
                0.80). The first GPU run should measure it.
     fp32       53.5 TFLOP/s, for fp32 GEMMs and every CUDA-core kernel
                (the fp32 fused attention): NOT measured either; the
                datasheet's 67.0 times the same 0.80. The 2026-11-24 fp32
                step achieved 38.9 TFLOP/s end to end (docs), so the rate is
                at least that.
   A row's floor is max(bytes / copy rate, FLOPs / math rate): the least
   time any kernel doing that work could take. The predicted time is the
   floor over the efficiency the row's kernel can be expected to reach
   (plan_efficiency: one short reason each), and at least 2 us per launch
   (an assumption, not measured here: a launch that finds the GPU idle
   costs a few microseconds; the kit's step keeps the queue ahead). */
#ifndef GPT2_SITES_H
#define GPT2_SITES_H
#include <math.h>
#include <stdio.h>
#include <string.h>

typedef struct plan_ceilings {
    double copy_Bps;   /* bytes per second, read + write */
    double gemm_flops; /* the precision's GEMM rate */
    double fma_flops;  /* CUDA-core fp32 */
    const char *gemm_source;
} plan_ceilings;

static plan_ceilings plan_ceilings_for(trn_cuda_precision p) {
    plan_ceilings c;
    c.copy_Bps = 3.0e12;
    c.fma_flops = 53.5e12;
    if (p == TRN_CUDA_BF16) { c.gemm_flops = 790e12; c.gemm_source = "bf16 GEMM 790 TFLOP/s (measured, 8192^3)"; }
    else if (p == TRN_CUDA_TF32) { c.gemm_flops = 395e12; c.gemm_source = "tf32 GEMM 395 TFLOP/s (datasheet x 0.80, not measured)"; }
    else { c.gemm_flops = 53.5e12; c.gemm_source = "fp32 GEMM 53.5 TFLOP/s (datasheet x 0.80, not measured)"; }
    return c;
}

#define PLAN_LAUNCH_S 2e-6 /* the least a launch is assumed to cost (see above) */

static int plan_is(const trn_cuda_site_row *r, const char *name) { return !strcmp(r->name, name); }
static int plan_is_classifier(const trn_cuda_site_row *r) { return r->scope && !strcmp(r->scope, "classifier"); }

/* the kernel behind a site runs its math on the tensor cores (GEMM rate) or
   on the CUDA cores (fp32 rate) */
static double plan_math_rate(const trn_cuda_site_row *r, trn_cuda_precision p, const plan_ceilings *c) {
    if (!r->m) return c->fma_flops;
    if (!strncmp(r->name, "flash", 5)) return p == TRN_CUDA_BF16 ? c->gemm_flops : c->fma_flops; /* fp32 fused: FMA */
    return c->gemm_flops;
}

/* cuBLAS on a GEMM: 128x128 output tiles, one per SM at a time (132 SMs on
   the H100): the last wave runs partly empty */
static double plan_waves(const trn_cuda_site_row *r) {
    double tiles = ceil(r->m / 128.0) * ceil(r->n / 128.0) * (r->batch > 0 ? r->batch : 1);
    double waves = ceil(tiles / 132.0);
    return tiles / (waves * 132.0);
}

/* What each site's kernel reached of its floor (floor / measured) on an
   H100 80GB HBM3, in bf16, GPT-2 124M at B=16, T=1024: tests/gpu/run.sh's
   bench/gpt2_cuda --precision bf16 --profile-csv on 2026-11-27, the code
   of that day (docs/gpu_h100_2026-11-27.md). Where a bf16 row's site and
   shape are here, the plan predicts with this efficiency, so the table
   predicts what was measured; other rows (other shapes, tf32, fp32) use
   the rules of plan_efficiency_rule below. Left out: the tiny PCIe copies
   and the loss mean, whose time is a launch's latency, not a floor's
   multiple. When a kernel is rewritten, its line here goes (the rule
   predicts it) until a GPU measures it: so far "flash bwd D" (0.39 then,
   one warp per row with 3 of 4 lanes idle), "flash bwd dkdv" (0.144
   then, with a global load of lse and D in each step's critical path) and
   the classifier's "cross-entropy fused fwd+bwd" (0.602 then: each row
   read twice, the second read mostly from HBM, not L2). */
static const struct plan_measured {
    const char *scope, *name;
    int m, n, k;
    double eff;
} plan_measured_bf16[] = {
    {"", "zero (memset)", 0, 0, 0, 0.832},
    {"", "embedding fwd", 0, 0, 0, 0.942},
    {"", "add", 0, 0, 0, 1.032},
    {"", "layernorm fwd", 0, 0, 0, 0.786},
    {"", "matmul fwd", 16384, 2304, 768, 0.748},
    {"", "matmul fwd", 16384, 768, 768, 0.673},
    {"", "add+layernorm fwd", 0, 0, 0, 0.890},
    {"", "matmul+gelu fwd", 16384, 3072, 768, 0.591},
    {"", "matmul fwd", 16384, 768, 3072, 0.911},
    {"classifier", "matmul fwd", 4096, 50304, 768, 0.861},
    {"classifier", "matmul bwd dinp gemm", 4096, 768, 50304, 1.015},
    {"classifier", "matmul bwd dW gemm", 50304, 768, 4096, 0.887},
    {"classifier", "convert", 0, 0, 0, 0.872},
    {"", "copy (device)", 0, 0, 0, 1.005},
    {"", "matmul bwd dW gemm+bgrad", 768, 3072, 16384, 0.733},
    {"", "matmul+dgelu bwd", 16384, 3072, 768, 0.551},
    {"", "matmul bwd dinp gemm", 16384, 768, 3072, 0.897},
    {"", "matmul bwd dW gemm+bgrad", 3072, 768, 16384, 0.609},
    {"", "matmul bwd dinp gemm", 16384, 768, 768, 0.668},
    {"", "matmul bwd dW gemm+bgrad", 768, 768, 16384, 0.407},
    {"", "matmul bwd dinp gemm", 16384, 768, 2304, 0.871},
    {"", "matmul bwd dW gemm+bgrad", 2304, 768, 16384, 0.551},
    {"", "embedding bwd", 0, 0, 0, 0.792},
    {"", "embedding bwd (batch summed)", 0, 0, 0, 0.389},
    {"", "grad norm (sum of squares)", 0, 0, 0, 0.846},
    {"", "adamw", 0, 0, 0, 0.818},
};

/* What each site's kernel is expected to reach of its floor, and why (the
   rule, for rows with no measurement above). The numbers describe the
   kernels as they are (2026-11-27): when a kernel is rewritten, its rule
   here is rewritten with it. */
static double plan_efficiency_rule(const trn_cuda_site_row *r, trn_cuda_precision p, int mem_bound, const char **why) {
    int bf16 = p == TRN_CUDA_BF16;
    if (!strcmp(r->scope ? r->scope : "", "(no site)")) { *why = "a launch with no site line: no estimate"; return 0.5; }
    /* the fp32 fused kernels (FMA on shared-memory tiles) ran once on an
       H100: the TF32 step took 447 ms, forward+loss 123.1, backward 322.5
       (docs/gpu_h100_2026-11-25.md); less this table's prediction for the
       other rows (64.3 and 35.3 ms) that leaves 58.8 ms for the forward and
       287 ms for the backward (split 4:3 by their products): the
       efficiencies below. The bf16 WMMA kernels have not run on a GPU. */
    if (plan_is(r, "flash attn fwd")) {
        *why = bf16 ? "WMMA; S, P, P.V through shared memory per 32-key tile; sync 2-byte K/V loads"
                    : "fp32 FMA on smem tiles; from the 2026-11-25 TF32 step";
        return bf16 ? 0.25 : 0.098;
    }
    if (plan_is(r, "flash attn bwd dkdv")) {
        *why = bf16 ? "4 products per key block, S and dS through shared memory" : "fp32 FMA; from the 2026-11-25 TF32 step";
        return bf16 ? 0.20 : 0.070;
    }
    if (plan_is(r, "flash attn bwd dq")) {
        *why = bf16 ? "recomputes S and dP: 3 products where 1 is needed" : "fp32 FMA, 3 products for 1; from 2026-11-25";
        return bf16 ? 0.07 : 0.0235;
    }
    /* FlashAttention-2 (>>cuda-fa2): mma.sync with S, P, O in registers.
       The FA2 paper reports mma.sync kernels (no wgmma) at ~335 TFLOP/s
       forward on an H100 at long sequences, 42% of the 790 measured here.
       Measured on an H100 (2026-11-27, bench/gpt2_cuda --profile, GPT-2
       124M B=16 T=1024): the forward at 0.19 of its floor (2.15 ms for 12
       layers) and the dQ pass at 0.18, both with one 16-row tile per warp:
       one ldmatrix.x4 per two mma.sync and 8-16 independent products per
       warp between barriers. At 0.19 the SM's shared memory runs at about a
       third of its 128 bytes a clock, the tensor cores at a sixth: the
       kernels wait on latency, not on a unit. Both now hold two row tiles
       per warp at head size 64 (one ldmatrix per four mma.sync, twice the
       independent products per load: FA2's own layout, 4 warps and 128
       query rows, 2 blocks an SM at 252-254 registers where 3 ran):
       expected about halfway from 0.19 to the paper's 0.42; not yet
       measured. */
    if (plan_is(r, "flash fwd")) {
        *why = "FA2 mma.sync, registers, 2 row tiles a warp (0.19 measured with 1)"; return 0.28;
    }
    if (plan_is(r, "flash bwd dkdv")) { /* measured 0.144 with 32 queries a step, K and V read from shared memory
                                           each step and lse/D loads in the step's critical path */
        *why = "FA2 4 products per key block; K, V in registers, 64 queries a step (0.144 measured before)"; return 0.20;
    }
    if (plan_is(r, "flash bwd dq")) { *why = "S and dP again, dQ += dS K, registers: as the forward"; return 0.28; }
    if (plan_is(r, "flash bwd D") || plan_is(r, "flash bwd dq sum")) { /* D measured 0.39 with 3 of 4 lanes idle */
        *why = "a streaming pass over (B,T,C) rows, 16-byte loads on every lane (rowsum; or the atomic accumulator)";
        return 0.60;
    }
    if (!strncmp(r->name, "attention", 9)) { *why = "cuBLAS batched, K = head size: (T,T) matrices through HBM"; return 0.5; }
    if (r->m) { /* cuBLAS(Lt) GEMMs */
        double w = plan_waves(r);
        /* "+bgrad": the dW GEMM whose BGRADB epilogue also writes the bias
           gradient (train_cuda.h, matmul backward). Its cost is modelled as
           the plain GEMM's: the sums run over tiles of B that the GEMM
           loads anyway, k x n adds against the product's 2 m k n FLOPs
           (1 / (2 m): m >= 768 here), and its extra bytes (the n fp32
           values written) are in the row. Not yet measured on a GPU. */
        int bg = strstr(r->name, "+bgrad") != NULL;
        if (mem_bound) { *why = "memory-bound GEMM: the epilogue streams C (read + write)"; return 0.70; }
        if (w < 0.5 && r->k >= 4096) {
            *why = bg ? "few output tiles (< half a wave), long K: split-K at best; + BGRADB as the plain GEMM"
                      : "few output tiles (< half a wave), long K: split-K at best";
            return 0.35;
        }
        if (w < 0.9) {
            *why = bg ? "tail wave partly empty (128x128 tiles on 132 SMs); + BGRADB as the plain GEMM"
                      : "tail wave partly empty (128x128 tiles on 132 SMs)";
            return 0.75 * w;
        }
        *why = bg ? "cuBLAS, full waves: at most 75% of the 8192^3 rate; + BGRADB as the plain GEMM"
                  : "cuBLAS, full waves: at most 75% of the 8192^3 rate at this size";
        return 0.75;
    }
    if (plan_is(r, "copy (device)")) { *why = "cudaMemcpyAsync: the yardstick itself"; return 0.95; }
    if (plan_is(r, "zero (memset)")) { *why = "cudaMemsetAsync: a write stream"; return 0.80; }
    if (plan_is(r, "adamw")) { *why = "4-byte loads, 7 fp32 streams, one pass"; return 0.75; }
    if (plan_is(r, "grad norm (sum of squares)")) { /* the 16-byte packs' 0.75 (a read-only stream, double sums) */
        *why = "1024 blocks of 16-byte loads (8 floats a step), one tree"; return 0.75;
    }
    if (plan_is(r, "cross-entropy fwd") || plan_is(r, "cross-entropy bwd")) {
        *why = "one block per row (166 rows a chunk: 1.3 waves), one 2-byte load in flight per warp";
        return bf16 ? 0.30 : 0.40;
    }
    /* trn__k_xent_fused_reg: a row read once into registers and shared
       memory, then written once (the two-pass kernel, which read each row
       twice, measured 0.602). Its loads are the 16-byte streams' (0.75 and
       up), but 2 expf and ~30 arithmetic instructions a column (counted in
       nvcc's PTX) keep the SMs busy about as long as the bytes take: bf16 has two blocks an SM to overlap
       one's loads with the other's math (0.70), fp32 one block (0.60). Not
       yet measured. */
    if (plan_is(r, "cross-entropy fused fwd+bwd")) {
        *why = bf16 ? "row read once (regs+smem), written once; 2 blocks/SM overlap loads and 2 expf a column"
                    : "row read once (regs+smem), written once; 1 block/SM: loads and math alternate";
        return bf16 ? 0.70 : 0.60;
    }
    if (plan_is(r, "layernorm fwd")) { *why = "a warp per row, 16-byte packs"; return bf16 ? 0.65 : 0.70; }
    if (plan_is(r, "add+layernorm fwd")) { /* the layernorm kernel with the add in its first pass (>>addln) */
        *why = "the layernorm's warp per row, 16-byte packs; the add in its first pass"; return bf16 ? 0.65 : 0.70;
    }
    if (plan_is(r, "layernorm bwd")) { /* trn__k_ln_bwd: one launch, 128 blocks of 8 warps */
        *why = "one launch, dout and inp read once, 16-byte packs; 1 wave of 128 blocks, 8 warps an SM; partials summed 16 + 8";
        return bf16 ? 0.70 : 0.75; /* the old two kernels measured 0.466 (H100, 2026-11-27); not yet measured */
    }
    if (plan_is(r, "embedding bwd")) { *why = "16-byte loads of dout, a 4-byte atomic per element; repeated tokens collide"; return 0.30; }
    /* positions (train_cuda.h's trn__k_embed_bwd_rows): the B rows of a
       position summed in registers (B 16-byte loads in flight a thread),
       then one atomic per table element (1/B of the elements read); below
       the plain 16-byte kernels' 0.75 for the strided rows and the atomics */
    if (plan_is(r, "embedding bwd (batch summed)")) {
        *why = "16-byte loads, the batch summed in registers, one atomic per table element"; return 0.60;
    }
    if (plan_is(r, "bias grad (column sums)")) { *why = "16-byte partials over 64 chunks, last block sums"; return 0.55; }
    if (plan_is(r, "add") || plan_is(r, "accumulate") || plan_is(r, "convert") || plan_is(r, "gelu fwd") ||
        plan_is(r, "gelu bwd") || plan_is(r, "embedding fwd")) {
        *why = "16-byte packs (8 bf16 / 4 fp32), a scalar tail"; return 0.75;
    }
    if (plan_is(r, "upload (host to device)") || plan_is(r, "download (device to host)")) {
        *why = "over PCIe, not HBM (tiny)"; return 0.01;
    }
    if (plan_is(r, "loss mean")) { *why = "one block of 1024 threads"; return 0.05; }
    *why = bf16 ? "elementwise, 2-byte scalar loads and stores" : "elementwise, 4-byte scalar loads and stores";
    return bf16 ? 0.50 : 0.70;
}

/* the efficiency of a row: measured (bf16, plan_measured_bf16) where there
   is a measurement, else the rule's; *why says which and the rule's reason */
static double plan_efficiency(const trn_cuda_site_row *r, trn_cuda_precision p, int mem_bound, const char **why) {
    static char buf[192];
    double e = plan_efficiency_rule(r, p, mem_bound, why);
    if (p != TRN_CUDA_BF16) return e;
    for (size_t i = 0; i < sizeof plan_measured_bf16 / sizeof plan_measured_bf16[0]; i++) {
        const struct plan_measured *q = &plan_measured_bf16[i];
        if (!strcmp(q->scope, r->scope ? r->scope : "") && plan_is(r, q->name) && q->m == r->m && q->n == r->n &&
            q->k == r->k) {
            snprintf(buf, sizeof buf, "H100 2026-11-27 (rule %.2f: %s)", e, *why);
            *why = buf;
            return q->eff;
        }
    }
    return e;
}

typedef struct plan_sums {
    double floor_ms, predicted_ms, measured_ms, bytes, flops;
    long long launches;
    double classifier_ms, classifier_floor_ms, classifier_bytes;
    long long classifier_launches;
} plan_sums;

/* The least the classifier (the LM head and its cross-entropy, N rows of
   C channels, Vp padded classes, E bytes per activation) must move and do,
   done the best known way: the logits GEMM, one fused cross-entropy pass
   that reads the logits and writes dlogits over them, the dinp GEMM and
   ONE dW GEMM over all rows (fp32 dW written once). Each GEMM's floor is
   max(bytes, FLOPs) at the ceilings. This is what "classifier <x>x its
   floor" compares against. */
static double plan_classifier_floor_ms(double N, double C, double Vp, double E, const plan_ceilings *c) {
    double fl = 2.0 * N * Vp * C, g;
    double t = 0.0;
    g = E * (N * C + Vp * C + N * Vp);          t += fmax(g / c->copy_Bps, fl / c->gemm_flops); /* logits */
    g = 2.0 * E * N * Vp + 12.0 * N;            t += g / c->copy_Bps;                         /* xent fwd+bwd */
    g = E * (N * Vp + Vp * C + N * C);          t += fmax(g / c->copy_Bps, fl / c->gemm_flops); /* dinp */
    g = E * (N * Vp + N * C) + 4.0 * Vp * C;    t += fmax(g / c->copy_Bps, fl / c->gemm_flops); /* dW */
    return 1e3 * t;
}

static void plan_label(const trn_cuda_site_row *r, char *buf, size_t cap) {
    if (r->m)
        snprintf(buf, cap, "%s%s%s %dx%dx%d%s", r->scope ? r->scope : "", r->scope ? " " : "", r->name, r->m, r->n, r->k,
                 r->batch > 1 ? "*" : "");
    else
        snprintf(buf, cap, "%s%s%s", r->scope ? r->scope : "", r->scope ? " " : "", r->name);
}

/* prints the table (rows in the order the step first reached them) and
   returns its sums; measured: the rows carry CUDA-event times */
static plan_sums plan_print(FILE *f, const trn_cuda_site_row *rows, int n, trn_cuda_precision p, int measured) {
    plan_ceilings c = plan_ceilings_for(p);
    plan_sums s;
    memset(&s, 0, sizeof s);
    fprintf(f, "ceilings: copy 3.0 TB/s (read + write, measured); %s; CUDA cores 53.5 TFLOP/s (datasheet x 0.80)\n",
            c.gemm_source);
    fprintf(f, "%-50s %6s %8s %9s %8s %5s %9s%s  %s\n", "site (GEMMs: M x N x K, * batched)", "launch", "GB",
            "GFLOP", "floor ms", "eff", "pred ms", measured ? "  meas ms  eff" : "", "why this efficiency");
    for (int i = 0; i < n; i++) {
        const trn_cuda_site_row *r = &rows[i];
        char label[160];
        const char *why = "";
        double tb = r->bytes / c.copy_Bps, tf = r->flops / plan_math_rate(r, p, &c), fl = fmax(tb, tf);
        double eff = plan_efficiency(r, p, tb >= tf, &why);
        double pred = fmax(fl / eff, (double)r->launches * PLAN_LAUNCH_S);
        if (!strcmp(r->scope ? r->scope : "", "(between sites)")) { eff = 0; pred = 0; fl = 0; why = "GPU idle, waiting for the host"; }
        plan_label(r, label, sizeof label);
        fprintf(f, "%-50.50s %6lld %8.3f %9.1f %8.3f %5.2f %9.3f", label, r->launches, r->bytes / 1e9, r->flops / 1e9,
                1e3 * fl, eff, 1e3 * pred);
        if (measured) fprintf(f, "  %7.3f %4.2f", r->ms, r->ms > 0 ? 1e3 * fl / r->ms : 0.0);
        fprintf(f, "  %s\n", why);
        s.floor_ms += 1e3 * fl;
        s.predicted_ms += 1e3 * pred;
        s.measured_ms += r->ms;
        s.bytes += r->bytes;
        s.flops += r->flops;
        s.launches += r->launches;
        if (plan_is_classifier(r)) {
            s.classifier_ms += measured ? r->ms : 1e3 * pred;
            s.classifier_bytes += r->bytes;
            s.classifier_launches += r->launches;
        }
    }
    fprintf(f, "%-50s %6lld %8.3f %9.1f %8.3f %5s %9.3f", "sum", s.launches, s.bytes / 1e9, s.flops / 1e9, s.floor_ms,
            "", s.predicted_ms);
    if (measured) fprintf(f, "  %7.3f", s.measured_ms);
    fprintf(f, "\n");
    return s;
}

/* the same rows as CSV (one header line), for scripts: tests/gpu/run.sh
   keeps the measured one */
static int plan_csv(const char *path, const trn_cuda_site_row *rows, int n, trn_cuda_precision p) {
    plan_ceilings c = plan_ceilings_for(p);
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fprintf(f, "scope,site,m,n,k,batch,calls,launches,bytes,flops,floor_ms,eff,predicted_ms,measured_ms\n");
    for (int i = 0; i < n; i++) {
        const trn_cuda_site_row *r = &rows[i];
        const char *why;
        double tb = r->bytes / c.copy_Bps, tf = r->flops / plan_math_rate(r, p, &c), fl = fmax(tb, tf);
        double eff = plan_efficiency(r, p, tb >= tf, &why);
        double pred = fmax(fl / eff, (double)r->launches * PLAN_LAUNCH_S);
        fprintf(f, "%s,%s,%d,%d,%d,%d,%lld,%lld,%.0f,%.0f,%.6f,%.3f,%.6f,%.6f\n", r->scope ? r->scope : "", r->name,
                r->m, r->n, r->k, r->batch, r->calls, r->launches, r->bytes, r->flops, 1e3 * fl, eff, 1e3 * pred, r->ms);
    }
    return fclose(f) == 0 ? 0 : -1;
}

/* one training step of examples/gpt2 (zero_grad, forward + loss, backward,
   clip, AdamW, the step's one host wait), as bench/gpt2_cuda times it */
static void plan_gpt2_step(gpt2 *g, trn_adamw *opt, const int *x, const int *y, int B, int T) {
    float loss, norm;
    trn_zero_grad(&g->m);
    trn_reset(&g->m);
    trn_tensor *l = gpt2_loss(g, x, y, B, T);
    trn_item_async(&g->m, l, &loss);
    trn_backward(&g->m, l);
    trn_clip_grad_norm_async(&g->m, 1.0f, &norm);
    trn_adamw_step(opt, &g->m, 1e-4f);
    trn_sync(&g->m);
}
#endif
