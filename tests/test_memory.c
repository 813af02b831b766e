// requires: test -f examples/gpt2.c
/* test_memory.c - the step keeps only what backward needs.

   1. The ledger of a small GPT-2 step (examples/gpt2.c's own model) equals
      what its shapes predict: the activation arena byte for byte (within
      1%, less than one (B,T,C) tensor), the activation-gradient block in
      the band that the lifetimes allow. A change that keeps one more
      buffer alive, or stops freeing gradients, fails here.
   2. trn_recompute (--recompute) gives bit-identical losses and gradients,
      over several AdamW steps, and keeps less.
   3. trn_linear_cross_entropy (the fused classifier, both ways) agrees with
      trn_linear + trn_cross_entropy, with the LM head tied to the
      embedding; evaluation mode gives the same loss; an incoming gradient
      of 2 doubles every gradient exactly. (Its finite-difference check is
      in test_ops.c.) */
#define TRN__XENT_CHUNK_FLOATS (7 * 64) /* 7 rows per chunk at Vp = 64 */
#define GPT2_NO_MAIN
#include "examples/gpt2.c"
#include "tests/check.h"

static gpt2_config small_cfg(void) {
    gpt2_config c;
    memset(&c, 0, sizeof c);
    c.n_layer = 2; c.n_head = 2; c.n_embd = 64; c.block_size = 64; c.vocab_size = 60; c.padded_vocab = 64;
    return c;
}

static void make_batch(int *x, int *y, int n, int V, uint64_t seed) {
    trn_rng r;
    trn_rng_seed(&r, seed);
    for (int i = 0; i < n; i++) { x[i] = (int)trn_rng_below(&r, (uint32_t)V); y[i] = (int)trn_rng_below(&r, (uint32_t)V); }
}

static size_t r64(size_t bytes) { return (bytes + 63) & ~(size_t)63; } /* the arenas' rounding */

/* 1. ------------------------------------------------------------------ */
static void test_ledger_band(void) {
    gpt2_config c = small_cfg();
    const int B = 2, T = 32, N = B * T, C = c.n_embd, L = c.n_layer, NH = c.n_head, Vp = c.padded_vocab;
    int x[64], y[64];
    gpt2 g;
    CHECK(gpt2_create(&g, &c, NULL) == TRN_OK, "create: %s\n", trn_error_reason());
    gpt2_init_weights(&g, 7);
    make_batch(x, y, N, c.vocab_size, 3);
    for (int step = 0; step < 3; step++) { /* step 0 sizes the blocks; then steady state */
        if (step == 2) trn_ledger_reset_peak();
        trn_zero_grad(&g.m);
        trn_reset(&g.m);
        trn_backward(&g.m, gpt2_loss(&g, x, y, B, T));
    }
    size_t U = (size_t)N * C * 4;                    /* one (B,T,C) float tensor */
    size_t row = r64((size_t)N * 4);                 /* one float (or int) per token */
    size_t lse = r64((size_t)B * NH * T * 4);       /* attention: one log-sum-exp per (b,h,t) row */
    /* forward saves, in the order the ops run:
         2 x ids, 2 x embedding (B,T,C), their sum
         per block: ln_1 (U + mean + rstd), qkv 3U, attention (U + lse),
                    proj U (the residual add writes over it: trn_add_inplace),
                    ln_2 (U + 2 rows), fc 4U, gelu 4U, fcp U (the same)
                                                               = 16U + lse + 4 rows
         ln_f U + 2 rows; classifier: targets, losses, the scalar loss
       The fused attention keeps no (B,NH,T,T) probabilities and its backward
       recomputes them block by block, so it needs no (B,NH,T,T) workspace.
       Here (B=2, NH=2, T=32, C=64, L=2): U = 16384, row = 256, lse = 512, so
         2*256 + 3*16384 + 2*(16*16384 + 512 + 4*256) + 16384 + 2*256 + 2*256 + 64
         = 594496 bytes (with trn_add instead it was 660032; with the
         materialized attention too, 708160: two layers' 16384-byte
         probabilities and one 16384-byte workspace more) */
    size_t arena = 2 * row + 3 * U + (size_t)L * (16 * U + lse + 4 * row) + U + 2 * row + 2 * row + 64;
    size_t got = trn_ledger_peak(TRN_HOST, TRN_KIND_ACTIVATIONS);
    printf("activations: %zu bytes, predicted %zu (U = %zu)\n", got, arena, U);
    CHECK(got >= arena && got <= arena + arena / 100, "activations %zu bytes, predicted %zu\n", got, arena);
    /* gradients of activations: at most these are alive at once
         classifier forward, the smaller of
           "chunks":  dx U, dW (Vp,C), chunk logits + dlogits 2 x (7,Vp), lse (7)
           "dlogits": dlogits + logits 2 x (N,Vp), lse (N)
         backward, inside the MLP (trn_mlp): d(mid residual) U + d(mlp out) U
           + d(fc out) 4U = 6U (its backward writes d(fc out) straight from
           d(mlp out): no d(gelu out) 4U; the three ops needed 9U)
       the block is the larger (6U here); first fit may leave a gap of up to 2U */
    size_t chunks = U + r64((size_t)Vp * C * 4) + 2 * r64(7 * (size_t)Vp * 4) + r64(7 * 4);
    size_t dlogits = 2 * r64((size_t)N * Vp * 4) + row;
    size_t fwd = TRN__MIN(chunks, dlogits);
    size_t lo = TRN__MAX(fwd, 6 * U), hi = lo + 2 * U;
    got = trn_ledger_peak(TRN_HOST, TRN_KIND_ACT_GRADS);
    printf("act grads: %zu bytes, predicted %zu..%zu (all of them kept: %zu)\n", got, lo, hi, (size_t)L * 20 * U);
    CHECK(got >= lo && got <= hi, "act grads %zu bytes, predicted %zu..%zu\n", got, lo, hi);
    CHECK(trn_ledger_current(TRN_HOST, TRN_KIND_ACT_GRADS) == got, "one block, no spans of their own in steady state\n");
    gpt2_free(&g);
}

/* 2. ------------------------------------------------------------------ */
static void test_recompute(void) {
    const preset *p = find_preset("tiny");
    gpt2_config c = p->cfg;
    const int B = 3, T = 29, N = B * T; /* T not a power of 2 */
    int x[3 * 29], y[3 * 29];
    gpt2 g[2];
    trn_adamw opt[2];
    trn_adamw_desc d;
    size_t act_peak[2];
    memset(&d, 0, sizeof d);
    d.lr = 3e-3f;
    for (int k = 0; k < 2; k++) {
        CHECK(gpt2_create(&g[k], &c, NULL) == TRN_OK, "create: %s\n", trn_error_reason());
        gpt2_init_weights(&g[k], 11);
        g[k].recompute = k;
        trn_adamw_init(&opt[k], &d);
    }
    int same_loss = 1, same_grads = 1;
    for (int step = 0; step < 4; step++) {
        make_batch(x, y, N, c.vocab_size, 100 + (uint64_t)step);
        float loss[2];
        for (int k = 0; k < 2; k++) {
            trn_zero_grad(&g[k].m);
            trn_reset(&g[k].m);
            trn_tensor *l = gpt2_loss(&g[k], x, y, B, T);
            loss[k] = trn_item(&g[k].m, l);
            trn_backward(&g[k].m, l);
            act_peak[k] = g[k].m.arena.high; /* (the ledger adds up both models) */
        }
        same_loss &= memcmp(&loss[0], &loss[1], sizeof(float)) == 0;
        same_grads &= memcmp(g[0].m.grad_data, g[1].m.grad_data, g[0].m.n_floats * sizeof(float)) == 0;
        for (int k = 0; k < 2; k++) trn_adamw_step(&opt[k], &g[k].m, d.lr);
    }
    CHECK(same_loss, "recompute: the losses differ\n");
    CHECK(same_grads, "recompute: the gradients are not bit-identical\n");
    CHECK(memcmp(g[0].m.param_data, g[1].m.param_data, g[0].m.n_floats * sizeof(float)) == 0,
          "recompute: the weights differ after 4 AdamW steps\n");
    /* stored: 2 blocks x 16 (B,T,C) + lse rows; recompute: each block's
       input and output, and one block's inside during its backward */
    printf("recompute: activations peak %zu bytes, stored %zu\n", act_peak[1], act_peak[0]);
    CHECK(act_peak[1] < act_peak[0], "recompute keeps less (%zu vs %zu)\n", act_peak[1], act_peak[0]);
    /* evaluation (tape off) with regions: same loss */
    g[1].m.grad_enabled = 0;
    g[0].m.grad_enabled = 0;
    trn_reset(&g[0].m); trn_reset(&g[1].m);
    float e0 = trn_item(&g[0].m, gpt2_loss(&g[0], x, y, B, T));
    float e1 = trn_item(&g[1].m, gpt2_loss(&g[1], x, y, B, T));
    CHECK(e0 == e1, "recompute: evaluation loss %.9g vs %.9g\n", e1, e0);
    for (int k = 0; k < 2; k++) { trn_adamw_free(&opt[k]); gpt2_free(&g[k]); }
}

/* 3. ------------------------------------------------------------------ */
static double max_abs(const float *a, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs((double)a[i]));
    return m;
}

static void test_fused_classifier(int B, int T, int chunked) {
    gpt2_config c = small_cfg();
    /* C = 32 < Vp = 64: the op picks the cheaper way in bytes, and with a
       fused cross-entropy (one (R,Vp) buffer) the chunks win only where
       dlogits (N,Vp) outweighs dx (N,C) + the fp32 dW (Vp,C) */
    c.n_embd = 32;
    const int N = B * T;
    int x[3 * 29], y[3 * 29];
    gpt2 g;
    CHECK(gpt2_create(&g, &c, NULL) == TRN_OK, "create: %s\n", trn_error_reason());
    gpt2_init_weights(&g, 5);
    make_batch(x, y, N, c.vocab_size, 9);
    size_t n = g.m.n_floats;
    float *ref = (float *)malloc(n * 4), *fused = (float *)malloc(n * 4);
    /* reference: logits, then cross-entropy */
    trn_zero_grad(&g.m);
    trn_reset(&g.m);
    trn_tensor *l = trn_cross_entropy(&g.m, gpt2_forward(&g, x, B, T), y, c.vocab_size);
    float loss_ref = trn_item(&g.m, l);
    trn_backward(&g.m, l);
    memcpy(ref, g.m.grad_data, n * 4);
    /* fused */
    trn_zero_grad(&g.m);
    trn_reset(&g.m);
    l = gpt2_loss(&g, x, y, B, T);
    float loss_fused = trn_item(&g.m, l);
    /* which of its two ways the op took (tape entry: iarg[0] = 1 "dlogits") */
    CHECK(!strcmp(g.m.tape[g.m.tape_len - 1].op, "linear_cross_entropy") &&
          g.m.tape[g.m.tape_len - 1].iarg[0] == !chunked, "B=%d T=%d should take the %s way\n", B, T,
          chunked ? "chunks" : "dlogits");
    trn_backward(&g.m, l);
    memcpy(fused, g.m.grad_data, n * 4);
    CHECK_NEAR(loss_fused, loss_ref, 0, 1e-6, "fused loss");
    double scale = max_abs(ref, n), worst = 0;
    for (size_t i = 0; i < n; i++) worst = fmax(worst, fabs((double)fused[i] - ref[i]));
    printf("fused classifier (%s, N=%d): loss %.7f vs %.7f, largest gradient difference %.3g (largest gradient %.3g)\n",
           chunked ? "chunks" : "dlogits", N, loss_fused, loss_ref, worst, scale);
    CHECK(scale > 1e-3 && worst <= 1e-5 * scale, "fused gradients differ by %.3g (scale %.3g)\n", worst, scale);
    /* the tied weight got both its uses: the embedding's rows and the head's */
    {
        double d = 0;
        for (size_t i = 0; i < g.wte->size; i++) d = fmax(d, fabs((double)fused[g.wte->offset + i] - ref[g.wte->offset + i]));
        CHECK(d <= 1e-5 * scale, "wte gradient (tied) differs by %.3g\n", d);
    }
    /* evaluation: only the loss, the same one */
    g.m.grad_enabled = 0;
    trn_reset(&g.m);
    float loss_eval = trn_item(&g.m, gpt2_loss(&g, x, y, B, T));
    g.m.grad_enabled = 1;
    CHECK(loss_eval == loss_fused, "evaluation loss %.9g vs %.9g\n", loss_eval, loss_fused);
    /* an incoming gradient of 2 (loss + loss): every gradient exactly doubles */
    trn_zero_grad(&g.m);
    trn_reset(&g.m);
    l = gpt2_loss(&g, x, y, B, T);
    trn_backward(&g.m, trn_add(&g.m, l, l));
    int exact = 1;
    for (size_t i = 0; i < n; i++) exact &= g.m.grad_data[i] == 2.0f * fused[i];
    CHECK(exact, "d(2 loss) is not exactly 2 d(loss)\n");
    free(ref); free(fused);
    gpt2_free(&g);
}

int main(void) {
    trn_set_threads(2);
    test_ledger_band();
    test_recompute();
    test_fused_classifier(3, 29, 1); /* 87 rows: 12 chunks of 7 and one of 3 */
    test_fused_classifier(1, 20, 0); /* 20 rows: dlogits (20,64) is smaller than dW (64,64) */
    trn_ledger_print("end of test_memory");
    return check_summary();
}
