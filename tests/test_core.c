/* test_core.c - the ledger's exact byte counts, AdamW against a hand-computed
   step, the LR schedule, clipping, the RNG, determinism, a small MLP that
   learns through the tape, gradient accumulation, and error paths. */
#define TRAIN_IMPLEMENTATION
#include "train.h"
#include "check.h"

#include <sys/wait.h>
#include <unistd.h>

static void test_ledger(void) {
    trn_model m;
    trn_adamw opt;
    trn_tensor *w, *b, *x, *y, *loss;
    float xs[8 * 5], ys[8 * 3];
    size_t w0 = trn_ledger_current(TRN_HOST, TRN_KIND_WEIGHTS);
    size_t n = 3 * 5 + 3;
    int i, shape[2] = {8, 5};
    trn_model_init(&m, NULL);
    w = trn_param2(&m, "w", 3, 5);
    b = trn_param1(&m, "b", 3);
    CHECK(m.n_floats == n, "n_floats %zu\n", m.n_floats);
    CHECK(w->offset == 0 && b->offset == 15, "offsets %zu %zu\n", w->offset, b->offset);
    CHECK(w->decay == 1 && b->decay == 0, "decay flags\n");
    CHECK(trn_model_alloc(&m) == TRN_OK, "alloc\n");
    CHECK(trn_ledger_current(TRN_HOST, TRN_KIND_WEIGHTS) - w0 == n * 4, "weights bytes %zu\n",
          trn_ledger_current(TRN_HOST, TRN_KIND_WEIGHTS) - w0);
    CHECK(trn_ledger_current(TRN_HOST, TRN_KIND_GRADS) == 0, "grads appear only at backward\n");
    CHECK(b->data == m.param_data + 15, "views into the flat buffer\n");
    for (i = 0; i < 40; i++) xs[i] = (float)i / 40.0f;
    for (i = 0; i < 24; i++) ys[i] = 1.0f;
    trn_init_const(&m, w, 0.1f);
    trn_reset(&m);
    x = trn_input(&m, "x", 2, shape, xs);
    y = trn_linear(&m, x, w, b);
    loss = trn_mse(&m, y, ys);
    trn_backward(&m, loss);
    CHECK(trn_ledger_current(TRN_HOST, TRN_KIND_GRADS) == n * 4, "grads bytes %zu\n",
          trn_ledger_current(TRN_HOST, TRN_KIND_GRADS));
    CHECK(m.grad_data && w->grad == m.grad_data && b->grad == m.grad_data + 15, "grad views\n");
    CHECK(trn_ledger_current(TRN_HOST, TRN_KIND_OPTIM) == 0, "no optimizer state before the first step\n");
    trn_adamw_init(&opt, NULL);
    CHECK(trn_adamw_step(&opt, &m, 1e-3f) == TRN_OK, "step\n");
    CHECK(trn_ledger_current(TRN_HOST, TRN_KIND_OPTIM) == 2 * n * 4, "m and v bytes %zu\n",
          trn_ledger_current(TRN_HOST, TRN_KIND_OPTIM));
    CHECK(trn_ledger_current(TRN_HOST, TRN_KIND_ACTIVATIONS) > 0, "activations in the arena\n");
    {   /* a second identical step allocates nothing new */
        trn_ledger_snapshot a, c;
        trn_reset(&m);
        trn_ledger_read(&a);
        x = trn_input(&m, "x", 2, shape, xs);
        loss = trn_mse(&m, trn_linear(&m, x, w, b), ys);
        trn_zero_grad(&m);
        trn_backward(&m, loss);
        CHECK(trn_adamw_step(&opt, &m, 1e-3f) == TRN_OK, "step 2\n");
        trn_ledger_read(&c);
        CHECK(memcmp(a.current, c.current, sizeof a.current) == 0, "steady state: no allocation in step 2\n");
        /* after trn_reset, the arena is one block: spill blocks are folded in */
        trn_reset(&m);
        CHECK(m.arena.n_spill == 0 && m.arena.cap >= m.arena.high, "arena consolidated\n");
    }
    trn_adamw_free(&opt);
    trn_model_free(&m);
    CHECK(trn_ledger_current(TRN_HOST, TRN_KIND_WEIGHTS) == w0, "weights freed\n");
    CHECK(trn_ledger_current(TRN_HOST, TRN_KIND_GRADS) == 0 && trn_ledger_current(TRN_HOST, TRN_KIND_OPTIM) == 0 &&
          trn_ledger_current(TRN_HOST, TRN_KIND_ACTIVATIONS) == 0, "all freed\n");
    {   /* raw allocations, alignment, counting */
        size_t t0 = trn_ledger_current(TRN_HOST, TRN_KIND_TEMP);
        char *p = (char *)trn_alloc(1000, TRN_KIND_TEMP);
        CHECK(p && ((uintptr_t)p & 63) == 0, "64-byte aligned\n");
        CHECK(trn_ledger_current(TRN_HOST, TRN_KIND_TEMP) == t0 + 1000, "temp +1000\n");
        CHECK(trn_ledger_peak(TRN_HOST, TRN_KIND_TEMP) >= t0 + 1000, "peak\n");
        trn_free(p);
        CHECK(trn_ledger_current(TRN_HOST, TRN_KIND_TEMP) == t0, "temp back\n");
        p = (char *)trn_alloc((size_t)-1 / 2, TRN_KIND_TEMP);
        CHECK(p == NULL && strstr(trn_error_reason(), "out of memory") != NULL, "huge allocation fails cleanly: %s\n",
              trn_error_reason());
        CHECK(trn_os_rss() > 0 && trn_os_peak_rss() >= trn_os_rss() / 2, "OS numbers\n");
    }
}

/* one AdamW step, by hand: p=1, g=0.5, lr=0.1, wd=0.1, step 1:
   m = 0.1*0.5 = 0.05, v = 0.001*0.25 = 0.00025, mhat = 0.5, vhat = 0.25,
   p = 1 - 0.1*(0.5/(0.5+1e-8) + 0.1*1) = 1 - 0.1*1.1 = 0.89
   step 2 with g=0.5 again: m=0.095, v=0.00049975, mhat=0.095/0.19=0.5,
   vhat=0.00049975/0.001999=0.25 -> p = 0.89 - 0.1*(1 + 0.1*0.89) = 0.7811 */
static void test_adamw(void) {
    float p = 1.0f, g = 0.5f, m = 0.0f, v = 0.0f;
    trn_adamw_desc d = trn_adamw_defaults(NULL);
    CHECK(d.lr == 1e-3f && d.beta1 == 0.9f && d.beta2 == 0.999f && d.eps == 1e-8f && d.weight_decay == 0.01f,
          "PyTorch defaults\n");
    trn_adamw_update(&p, &g, &m, &v, 1, 0.1f, 0.9f, 0.999f, 1e-8f, 0.1f, 1.0f - 0.9f, 1.0f - 0.999f);
    CHECK_NEAR(p, 0.89, 1e-6, 0, "adamw step 1");
    CHECK_NEAR(m, 0.05, 1e-7, 0, "m");
    CHECK_NEAR(v, 0.00025, 1e-8, 0, "v");
    trn_adamw_update(&p, &g, &m, &v, 1, 0.1f, 0.9f, 0.999f, 1e-8f, 0.1f, 1.0f - 0.81f, 1.0f - 0.998001f);
    CHECK_NEAR(p, 0.7811, 1e-5, 0, "adamw step 2");
    {   /* no decay on 1-D parameters by default; no_weight_decay turns it off */
        trn_adamw_desc nd;
        memset(&nd, 0, sizeof nd);
        nd.no_weight_decay = 1;
        CHECK(trn_adamw_defaults(&nd).weight_decay == 0.0f, "no_weight_decay\n");
    }
}

static void test_schedule_clip_rng(void) {
    trn_rng a, b;
    int i, same = 1, perm[10], seen = 0;
    double mean = 0, var = 0;
    CHECK_NEAR(trn_lr_schedule(0, 10, 100, 1.0f, 0.1f), 0.1, 1e-6, 0, "warmup step 0");
    CHECK_NEAR(trn_lr_schedule(9, 10, 100, 1.0f, 0.1f), 1.0, 1e-6, 0, "warmup end");
    CHECK_NEAR(trn_lr_schedule(10, 10, 100, 1.0f, 0.1f), 1.0, 1e-6, 0, "cosine start");
    CHECK_NEAR(trn_lr_schedule(55, 10, 100, 1.0f, 0.1f), 0.55, 1e-6, 0, "cosine middle");
    CHECK_NEAR(trn_lr_schedule(100, 10, 100, 1.0f, 0.1f), 0.1, 1e-6, 0, "floor");
    trn_rng_seed(&a, 42); trn_rng_seed(&b, 42);
    for (i = 0; i < 1000; i++) same &= trn_rng_next(&a) == trn_rng_next(&b);
    CHECK(same, "same seed, same stream\n");
    trn_rng_seed(&a, 0);
    CHECK(trn_rng_next(&a) == 0xE220A8397B1DCDAFull, "splitmix64 reference value for seed 0\n");
    for (i = 0; i < 100000; i++) { double z = trn_rng_normal(&a); mean += z; var += z * z; }
    mean /= 100000; var = var / 100000 - mean * mean;
    CHECK(fabs(mean) < 0.02 && fabs(var - 1.0) < 0.03, "normal: mean %g var %g\n", mean, var);
    for (i = 0; i < 10; i++) perm[i] = i;
    trn_rng_shuffle(&a, perm, 10);
    for (i = 0; i < 10; i++) seen |= 1 << perm[i];
    CHECK(seen == 1023, "shuffle is a permutation\n");
    {
        trn_model m;
        trn_tensor *w;
        float norm;
        trn_model_init(&m, NULL);
        w = trn_param1(&m, "w", 4);
        trn_model_alloc(&m);
        trn_model_alloc_grads(&m);
        w->grad[0] = 3; w->grad[1] = 4;  /* norm 5 */
        norm = trn_clip_grad_norm(&m, 1.0f);
        CHECK_NEAR(norm, 5.0, 1e-6, 0, "norm before clipping");
        CHECK_NEAR(trn_grad_norm(&m), 1.0, 1e-5, 0, "norm after clipping");
        CHECK_NEAR(w->grad[0], 0.6, 1e-5, 0, "clipped grad");
        trn_zero_grad(&m);
        CHECK(w->grad[0] == 0 && w->grad[1] == 0, "zero_grad\n");
        trn_model_free(&m);
    }
}

/* a 2-layer MLP learns XOR-like targets through the tape */
typedef struct { trn_model m; trn_tensor *w1, *b1, *w2, *b2; } mlp;

static void mlp_init(mlp *n, uint64_t seed) {
    trn_rng r;
    trn_model_init(&n->m, NULL);
    n->w1 = trn_param2(&n->m, "w1", 16, 2);
    n->b1 = trn_param1(&n->m, "b1", 16);
    n->w2 = trn_param2(&n->m, "w2", 1, 16);
    n->b2 = trn_param1(&n->m, "b2", 1);
    trn_model_alloc(&n->m);
    trn_rng_seed(&r, seed);
    trn_init_normal(&n->m, n->w1, 0, 1.0f, &r);
    trn_init_normal(&n->m, n->w2, 0, 0.5f, &r);
}

static float mlp_train(mlp *n, int steps, int accum) {
    static const float X[8] = {0, 0, 0, 1, 1, 0, 1, 1}, Y[4] = {0, 1, 1, 0};
    trn_adamw opt;
    trn_adamw_desc d;
    float loss = 0;
    int s, a, shape[2] = {4, 2};
    memset(&d, 0, sizeof d);
    d.no_weight_decay = 1;
    trn_adamw_init(&opt, &d);
    for (s = 0; s < steps; s++) {
        trn_zero_grad(&n->m);
        for (a = 0; a < accum; a++) { /* gradient accumulation: grads add up */
            trn_tensor *x, *h, *l;
            trn_reset(&n->m);
            x = trn_input(&n->m, "x", 2, shape, X);
            h = trn_relu(&n->m, trn_linear(&n->m, x, n->w1, n->b1));
            l = trn_mse(&n->m, trn_linear(&n->m, h, n->w2, n->b2), Y);
            loss = trn_item(&n->m, l);
            trn_backward(&n->m, l);
        }
        if (accum > 1) trn_scale(n->m.grad_data, 1.0f / accum, n->m.n_floats);
        trn_clip_grad_norm(&n->m, 10.0f);
        trn_adamw_step(&opt, &n->m, trn_lr_schedule(s, 10, steps, 0.05f, 0.001f));
    }
    trn_adamw_free(&opt);
    return loss;
}

static void test_mlp(void) {
    mlp a, b, c;
    float la, lb, lc;
    mlp_init(&a, 7); la = mlp_train(&a, 400, 1);
    CHECK(la < 1e-3, "MLP learns XOR: final loss %g\n", la);
    mlp_init(&b, 7); lb = mlp_train(&b, 400, 1);
    CHECK(la == lb && memcmp(a.m.param_data, b.m.param_data, a.m.n_floats * 4) == 0,
          "same seed and threads: bit-identical weights\n");
    /* accumulating the same batch twice and halving equals one pass */
    mlp_init(&c, 7); lc = mlp_train(&c, 400, 2);
    {
        size_t i; double diff = 0;
        for (i = 0; i < a.m.n_floats; i++) diff = fmax(diff, fabs(a.m.param_data[i] - c.m.param_data[i]));
        CHECK(diff < 1e-4, "gradient accumulation x2 matches one pass (max diff %g)\n", diff);
    }
    (void)lc;
    trn_model_free(&a.m); trn_model_free(&b.m); trn_model_free(&c.m);
}

/* programmer errors stop with a message naming the op and the shapes */
static void linear_shape_mismatch(void *unused) {
    trn_model m;
    trn_tensor *w, *x;
    int shape[2] = {4, 3};
    float xs[12] = {0};
    (void)unused;
    trn_model_init(&m, NULL);
    w = trn_param2(&m, "fc.weight", 8, 5);
    trn_model_alloc(&m);
    trn_reset(&m);
    x = trn_input(&m, "x", 2, shape, xs);
    trn_linear(&m, x, w, NULL);
}
static void test_fatal(void) {
    char buf[512];
    check_fatal("shape mismatch", linear_shape_mismatch, NULL, "(4,3)", "(8,5)", buf, sizeof buf);
    CHECK(strstr(buf, "trn_linear") != NULL, "the message names the op: %s\n", buf);
    {
        trn_model m;
        trn_adamw o;
        CHECK(trn_model_init(NULL, NULL) == TRN_ERR_INVALID, "NULL model\n");
        trn_model_init(&m, NULL);
        CHECK(trn_model_alloc(&m) == TRN_ERR_INVALID, "alloc with no params\n");
        trn_param1(&m, "p", 3);
        trn_model_alloc(&m);
        trn_adamw_init(&o, NULL);
        CHECK(trn_adamw_step(&o, &m, 0.1f) == TRN_ERR_INVALID, "step before backward\n");
        CHECK(strstr(trn_error_reason(), "trn_backward") != NULL, "reason says why: %s\n", trn_error_reason());
        CHECK(strcmp(trn_result_string(TRN_ERR_CHECKSUM), "TRN_ERR_CHECKSUM") == 0, "result strings\n");
        trn_model_free(&m);
    }
}

/* trn_read_params / trn_write_params: a range of the flat weight buffer
   (two parameters: the range crosses from one into the next) */
static void params_out_of_range(void *mp) {
    float h[4];
    trn_read_params((trn_model *)mp, 5, h, 4); /* [5,9) of 7 */
}
static void test_params_io(void) {
    trn_model m;
    trn_tensor *a, *b;
    float in[3] = {1.5f, -2.0f, 3.25f}, out[7], back[2];
    char buf[512];
    trn_model_init(&m, NULL);
    a = trn_param1(&m, "a", 4);
    b = trn_param1(&m, "b", 3);
    trn_model_alloc(&m);
    trn_write_params(&m, 3, in, 3); /* a[3], b[0], b[1] */
    trn_read_params(&m, 0, out, 7);
    CHECK(out[0] == 0 && out[2] == 0 && out[3] == 1.5f && out[4] == -2.0f && out[5] == 3.25f && out[6] == 0,
          "write [3,6), read all: %g %g %g %g\n", out[2], out[3], out[4], out[5]);
    trn_read(&m, b, out);
    CHECK(out[0] == -2.0f && out[1] == 3.25f, "the tensor sees the flat write: %g %g\n", out[0], out[1]);
    trn_read_params(&m, 4, back, 2);
    CHECK(back[0] == -2.0f && back[1] == 3.25f && a->size == 4, "read [4,6)\n");
    check_fatal("read past the end", params_out_of_range, &m, "trn_read_params", "[5,9)", buf, sizeof buf);
    trn_model_free(&m);
}

/* issue 24 item 9, "garbled error lines": a failure that wraps the reason
   below it (trn_fail(r, "%s: %s", path, trn_error_reason())) is printed
   intact, even when it is longer than the one it wraps */
static void test_nested_reason(void) {
    char want[600];
    trn_fail(TRN_ERR_IO, "json: Is a directory");
    trn_fail(TRN_ERR_IO, "runs/x/config.json: %s", trn_error_reason());
    CHECK(strcmp(trn_error_reason(), "runs/x/config.json: json: Is a directory") == 0, "nested reason garbled: '%s'\n",
          trn_error_reason());
    trn_fail(TRN_ERR_NOMEM, "%s: bytes for gradients", "trn_model_alloc_grads");
    trn_fail(TRN_ERR_NOMEM, "rank 1: %s (%s)", trn_error_reason(), trn_error_reason());
    CHECK(strcmp(trn_error_reason(), "rank 1: trn_model_alloc_grads: bytes for gradients (trn_model_alloc_grads: bytes for "
                                     "gradients)") == 0, "nested reason twice: '%s'\n", trn_error_reason());
    memset(want, 'a', 508); want[508] = 0; /* longer than the buffer: cut, not garbled */
    trn_fail(TRN_ERR_IO, "%s", want);
    trn_fail(TRN_ERR_IO, "x: %s", trn_error_reason());
    CHECK(strncmp(trn_error_reason(), "x: aaaa", 7) == 0 && strlen(trn_error_reason()) == 511, "a long nested reason: %zu\n",
          strlen(trn_error_reason()));
}

int main(void) {
    trn_set_threads(2);
    test_nested_reason();
    test_ledger();
    test_adamw();
    test_schedule_clip_rng();
    test_mlp();
    test_fatal();
    test_params_io();
    trn_ledger_print("end of test_core");
    return check_summary();
}
