// requires: test -f examples/llama.c
/* test_large_vocab.c - Llama 3's vocabulary, 128,256 tokens, through
   examples/llama.c's model (1 layer, C = 16) on the CPU backend, with the
   classifier's real chunk size (TRN__XENT_CHUNK_FLOATS as shipped):
     1. ids above 65535 go in (the embedding) and come out (the targets):
        with the head zeroed every logit is 0 and the loss is exactly
        ln(128,256) = 11.76175; an AdamW step on targets >= 65536 keeps it
        finite and lowers it;
     2. the ledger: the classifier (trn_linear_cross_entropy) holds its
        chunks, not the (B,T,V) logits. Its act-grads block equals the
        chunk formula dx (N,C) + dW (Vp,C) + logits (R,Vp) + lse (R),
        R = 2^23 / Vp rows split evenly, and no (N,Vp) tensor sits in
        the activations. Unfused (trn_linear + trn_cross_entropy, what
        examples/llama did before) the logits alone were N*Vp*4 bytes;
     3. the sampler's top-k for a large k (a sort of (logit, id) pairs,
        not k passes over V) orders ids as the selection sort does.
   The NumPy reference of the same model's training is in test_llama.sh
   (a 32-bit shard through examples/llama --init). */
#define LLAMA_NO_MAIN
#include "examples/llama.c"
#include "tests/check.h"

static size_t r64(size_t bytes) { return (bytes + 63) & ~(size_t)63; } /* the arenas' rounding */

int main(void) {
    /* L, NH, NKV, C, hs, F, maxT, V, Vp, theta, eps */
    llama_config cfg = {1, 2, 1, 16, 8, 32, 64, 128256, 0, 500000.0f, 1e-5f, 0, {0, 0.0f, 0.0f, 0.0f, 0}};
    enum { B = 3, T = 64, N = B * T };
    const int C = 16;
    static int x[N], y[N];
    llama g;
    trn_adamw opt;
    trn_adamw_desc d;
    trn_rng rng;
    float loss[2];
    int i, big = 0;
    trn_set_threads(2);
    cfg.padded_vocab = pad_vocab(cfg.vocab_size);
    const int V = cfg.vocab_size, Vp = cfg.padded_vocab;
    CHECK(Vp == 128256, "128,256 = 1002 x 128 needs no padding (got %d)\n", Vp);
    CHECK(llama_create(&g, &cfg, NULL) == TRN_OK, "llama_create: %s\n", trn_error_reason());
    llama_init_weights(&g, 5);
    { /* the head zeroed: every logit 0, loss ln(V) */
        float *zeros = (float *)calloc(g.head->size, sizeof(float));
        trn_write(&g.m, g.head, zeros);
        free(zeros);
    }
    trn_rng_seed(&rng, 17);
    for (i = 0; i < N; i++) {
        x[i] = (int)trn_rng_below(&rng, (uint32_t)V);
        y[i] = 65536 + (int)trn_rng_below(&rng, (uint32_t)(V - 65536)); /* every target needs 17 bits */
        big += x[i] > 65535;
    }
    x[0] = V - 1; y[0] = V - 1;
    CHECK(big > N / 3, "inputs above 65535: %d of %d\n", big, N);
    memset(&d, 0, sizeof d);
    d.lr = 1e-2f;
    trn_adamw_init(&opt, &d);
    for (int s = 0; s < 2; s++) {
        if (s == 1) trn_ledger_reset_peak(); /* step 0 sizes the arenas; then steady state */
        trn_zero_grad(&g.m);
        trn_reset(&g.m);
        trn_tensor *l = llama_loss(&g, x, y, B, T);
        loss[s] = trn_item(&g.m, l);
        if (s == 0) {
            trn_tape_entry *e = &g.m.tape[g.m.tape_len - 1];
            CHECK(!strcmp(e->op, "linear_cross_entropy") && e->iarg[0] == 0,
                  "the loss is the fused classifier in chunks (op %s, dlogits way %d)\n", e->op, e->iarg[0]);
        }
        trn_backward(&g.m, l);
        CHECK(trn_adamw_step(&opt, &g.m, d.lr) == TRN_OK, "adamw: %s\n", trn_error_reason());
    }
    printf("V = %d: loss %.6f (ln V = %.6f) -> %.6f\n", V, loss[0], log((double)V), loss[1]);
    CHECK_NEAR(loss[0], log((double)V), 0, 1e-6, "step 0 loss with a zero head is ln(128256)");
    CHECK(isfinite(loss[1]) && loss[1] < loss[0] - 0.05f, "an AdamW step lowers the loss: %.6f -> %.6f\n", loss[0],
          loss[1]);

    /* 2. the ledger: R rows a chunk, as trn_linear_cross_entropy picks them */
    int R = (int)((size_t)TRN__XENT_CHUNK_FLOATS / (size_t)Vp), nchunk = (N + R - 1) / R;
    R = (N + nchunk - 1) / nchunk; /* 65 -> 3 chunks of 64 rows */
    size_t chunks = r64((size_t)N * C * 4) + r64((size_t)Vp * C * 4) + r64((size_t)R * Vp * 4) + r64((size_t)R * 4);
    size_t full = (size_t)N * Vp * 4; /* one (B,T,Vp) float tensor: the logits, or their gradient */
    size_t got = trn_ledger_peak(TRN_HOST, TRN_KIND_ACT_GRADS), act = trn_ledger_peak(TRN_HOST, TRN_KIND_ACTIVATIONS);
    printf("classifier: %d chunks of %d rows; act grads %zu bytes, chunk formula %zu, one (B,T,Vp) tensor %zu; "
           "activations %zu\n", nchunk, R, got, chunks, full, act);
    CHECK(got == chunks, "act grads %zu bytes, the chunk formula says %zu\n", got, chunks);
    CHECK(got < full / 2, "the classifier holds %zu bytes, not the (B,T,Vp) logits (%zu)\n", got, full);
    CHECK(act < full / 10, "activations %zu bytes hold no (B,T,Vp) logits (%zu)\n", act, full);

    /* 3. sampling's top-k at this V: the (logit, id) sort that a large k
       takes orders the ids as the selection sort of a small k does */
    {
        float *lg = (float *)malloc(sizeof(float) * (size_t)V);
        int *a = (int *)malloc(sizeof(int) * (size_t)V), ordered = 1, same = 1;
        for (i = 0; i < V; i++) lg[i] = (float)trn_rng_normal(&rng);
        lg[V - 1] = 10.0f; lg[70000] = 9.0f; lg[3] = 9.0f; /* a tie: the smaller id first */
        top_pairs(a, lg, V);
        for (i = 1; i < V; i++) ordered &= lg[a[i - 1]] > lg[a[i]] || (lg[a[i - 1]] == lg[a[i]] && a[i - 1] < a[i]);
        for (int k = 0; k < 40; k++) { /* the selection sort's first 40 */
            int best = -1;
            for (int v = 0; v < V; v++) {
                int taken = 0;
                for (int j = 0; j < k; j++) taken |= a[j] == v;
                if (!taken && (best < 0 || lg[v] > lg[best])) best = v;
            }
            same &= a[k] == best;
        }
        CHECK(ordered && same && a[0] == V - 1 && a[1] == 3 && a[2] == 70000,
              "top_pairs: every id, largest logit first (ordered %d, first 40 as selection %d; %d %d %d)\n", ordered,
              same, a[0], a[1], a[2]);
        free(lg);
        free(a);
    }

    /* evaluation (tape off): the same op, the loss only */
    trn_no_grad(&g.m);
    trn_reset(&g.m);
    float ev = trn_item(&g.m, llama_loss(&g, x, y, B, T));
    CHECK(isfinite(ev) && ev < loss[0], "evaluation loss %.6f\n", ev);
    trn_adamw_free(&opt);
    llama_free(&g);
    return check_summary();
}
