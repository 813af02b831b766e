/* test_optim.c - the training API a PyTorch user expects: SGD (momentum,
   dampening, Nesterov, L2 weight decay) against torch.optim.SGD's update
   rule written out in the test; parameter groups (lr scale, own weight
   decay, glob patterns); a weight decay of 0 is 0; the four schedules with
   warmup; no_grad and eval as calls; gradient accumulation (K scaled
   micro-batches give the gradient of one big batch); SGD state through a
   checkpoint, resumed bit for bit. */
#define TRAIN_IMPLEMENTATION
#include "train.h"
#include "check.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- SGD against the rule, step by step -------------------------------- */
/* torch.optim.SGD for one element, as its documentation states it */
static void sgd_ref(float *p, float *buf, int *has_buf, float g, float lr, float mom, float damp, float wd, int nesterov) {
    float d = g + wd * *p;
    if (mom != 0.0f) {
        if (!*has_buf) { *buf = d; *has_buf = 1; }
        else *buf = mom * *buf + (1.0f - damp) * d;
        d = nesterov ? d + mom * *buf : *buf;
    }
    *p -= lr * d;
}

static void test_sgd_rule(float mom, float damp, float wd, int nesterov) {
    trn_model m;
    trn_tensor *w;
    trn_adamw opt;
    trn_adamw_desc d;
    float ref[37], buf[37] = {0};
    int has[37] = {0}, i, s, bad = 0;
    trn_rng rng;
    trn_model_init(&m, NULL);
    w = trn_param2(&m, "w", 37, 1);
    CHECK(trn_model_alloc(&m) == TRN_OK && trn_model_alloc_grads(&m) == TRN_OK, "alloc\n");
    trn_rng_seed(&rng, 7);
    trn_init_normal(&m, w, 0.0f, 1.0f, &rng);
    memcpy(ref, w->data, sizeof ref);
    memset(&d, 0, sizeof d);
    d.algo = TRN_OPTIM_SGD; d.lr = 0.05f; d.momentum = mom; d.dampening = damp; d.weight_decay = wd; d.nesterov = nesterov;
    trn_adamw_init(&opt, &d);
    for (s = 0; s < 5; s++) {
        for (i = 0; i < 37; i++) w->grad[i] = trn_rng_normal(&rng);
        for (i = 0; i < 37; i++) sgd_ref(&ref[i], &buf[i], &has[i], w->grad[i], 0.05f, mom, damp, wd, nesterov);
        CHECK(trn_adamw_step(&opt, &m, 0.05f) == TRN_OK, "sgd step: %s\n", trn_error_reason());
        for (i = 0; i < 37; i++) if (fabsf(w->data[i] - ref[i]) > 1e-6f * (1.0f + fabsf(ref[i]))) bad++;
    }
    CHECK(bad == 0, "SGD momentum %g dampening %g wd %g nesterov %d: %d values off the rule\n", mom, damp, wd, nesterov, bad);
    /* the momentum buffer is optimizer state in the ledger; plain SGD has none */
    CHECK((opt.m != NULL) == (mom != 0.0f) && opt.v == NULL, "SGD state: m %p v %p\n", (void *)opt.m, (void *)opt.v);
    if (mom != 0.0f) CHECK(memcmp(opt.m, buf, sizeof buf) == 0 || bad, "momentum buffer differs from the rule's\n");
    printf("ok - SGD momentum %.2f dampening %.2f weight decay %.2f nesterov %d: 5 steps on the rule\n", mom, damp, wd, nesterov);
    trn_adamw_free(&opt);
    trn_model_free(&m);
}

static void test_sgd_invalid(void) {
    trn_model m;
    trn_adamw opt;
    trn_adamw_desc d;
    trn_model_init(&m, NULL);
    trn_param1(&m, "b", 3);
    trn_model_alloc(&m);
    trn_model_alloc_grads(&m);
    memset(&d, 0, sizeof d);
    d.algo = TRN_OPTIM_SGD; d.nesterov = 1; /* Nesterov without momentum: torch refuses it too */
    trn_adamw_init(&opt, &d);
    CHECK(trn_adamw_step(&opt, &m, 0.1f) == TRN_ERR_INVALID, "Nesterov with momentum 0 accepted\n");
    opt.desc.momentum = 0.9f; opt.desc.dampening = 0.1f;
    CHECK(trn_adamw_step(&opt, &m, 0.1f) == TRN_ERR_INVALID, "Nesterov with dampening accepted\n");
    opt.desc.dampening = 0.0f;
    CHECK(trn_adamw_step(&opt, &m, 0.1f) == TRN_OK, "valid Nesterov refused: %s\n", trn_error_reason());
    trn_adamw_free(&opt);
    trn_model_free(&m);
}

/* ---- weight decay 0 is 0; parameter groups ------------------------------- */
/* with zero gradients AdamW's update is only the decay: p *= 1 - lr*wd */
static void test_decay_and_groups(void) {
    trn_model m;
    trn_tensor *w1, *w2, *b1, *emb;
    trn_adamw opt;
    trn_adamw_desc d, e;
    const float lr = 0.1f;
    memset(&d, 0, sizeof d);
    e = trn_adamw_defaults(&d);
    CHECK(e.weight_decay == 0.0f, "a desc with weight_decay 0 gives %g\n", e.weight_decay);
    e = trn_adamw_defaults(NULL);
    CHECK(e.weight_decay == 0.01f && e.lr == 1e-3f && e.beta2 == 0.999f, "NULL desc: wd %g lr %g\n", e.weight_decay, e.lr);
    d.weight_decay = 0.5f; d.no_weight_decay = 1;
    CHECK(trn_adamw_defaults(&d).weight_decay == 0.0f, "no_weight_decay ignored\n");

    trn_model_init(&m, NULL);
    w1 = trn_param2(&m, "h.0.w", 2, 3);
    b1 = trn_param1(&m, "h.0.bias", 3);
    w2 = trn_param2(&m, "h.1.w", 2, 3);
    emb = trn_param2(&m, "wte", 4, 3);
    trn_model_alloc(&m);
    trn_model_alloc_grads(&m);
    trn_init_const(&m, w1, 1.0f); trn_init_const(&m, b1, 1.0f);
    trn_init_const(&m, w2, 1.0f); trn_init_const(&m, emb, 1.0f);
    /* 1. a desc weight decay of 0 leaves everything as it is */
    memset(&d, 0, sizeof d);
    d.lr = lr;
    trn_adamw_init(&opt, &d);
    trn_adamw_step(&opt, &m, lr);
    CHECK(w1->data[0] == 1.0f && emb->data[5] == 1.0f, "weight decay 0 decayed: %.9g\n", w1->data[0]);
    trn_adamw_free(&opt);
    /* 2. groups: glob patterns, own weight decay (even on a bias), lr scale */
    CHECK(trn_param_group(&m, "h.*.w", 1.0f, 0.0f) == 2, "'h.*.w' should match 2 tensors\n");
    CHECK(trn_param_group(&m, "*bias", 1.0f, 0.5f) == 1, "'*bias' should match 1 tensor\n");
    CHECK(trn_param_group(&m, "wte", 0.5f, -1.0f) == 1, "'wte' should match 1 tensor\n");
    d.weight_decay = 0.2f;
    trn_adamw_init(&opt, &d);
    trn_adamw_step(&opt, &m, lr);
    CHECK(w1->data[0] == 1.0f && w2->data[5] == 1.0f, "group weight decay 0 decayed: %.9g\n", w1->data[0]);
    CHECK_NEAR(b1->data[1], 1.0f - lr * 0.5f, 1e-7, 0, "bias with its own weight decay 0.5");
    CHECK_NEAR(emb->data[2], 1.0f - lr * 0.5f * 0.2f, 1e-7, 0, "embedding: lr x 0.5, the optimizer's decay 0.2");
    trn_adamw_free(&opt);
    /* 3. lr scale 0 freezes, under SGD too */
    trn_param_group(&m, "*", 0.0f, -1.0f);
    w1->grad[0] = 3.0f;
    d.algo = TRN_OPTIM_SGD; d.momentum = 0.9f;
    trn_adamw_init(&opt, &d);
    trn_adamw_step(&opt, &m, lr);
    CHECK(w1->data[0] == 1.0f, "lr scale 0 did not freeze: %.9g\n", w1->data[0]);
    printf("ok - weight decay 0 is 0; groups: patterns, own decay, lr scale\n");
    trn_adamw_free(&opt);
    trn_model_free(&m);
}

/* ---- schedules ----------------------------------------------------------- */
static void test_schedules(void) {
    trn_schedule s;
    long long t;
    int bad = 0;
    memset(&s, 0, sizeof s);
    s.warmup = 10; s.total = 110; s.max_lr = 1.0f; s.min_lr = 0.1f;
    /* warmup is the same for every kind */
    for (s.kind = TRN_SCHEDULE_COSINE; s.kind <= TRN_SCHEDULE_WSD; s.kind = (trn_schedule_kind)(s.kind + 1)) {
        CHECK_NEAR(trn_schedule_lr(&s, 0), 0.1f, 1e-7, 0, trn_schedule_name(s.kind));
        CHECK_NEAR(trn_schedule_lr(&s, 4), 0.5f, 1e-7, 0, trn_schedule_name(s.kind));
        CHECK_NEAR(trn_schedule_lr(&s, 10), 1.0f, 1e-7, 0, trn_schedule_name(s.kind));
        CHECK(trn_schedule_parse(trn_schedule_name(s.kind)) == (int)s.kind, "parse(name(%d))\n", (int)s.kind);
    }
    CHECK(trn_schedule_parse("step") == -1, "unknown schedule name accepted\n");
    s.kind = TRN_SCHEDULE_COSINE;
    for (t = 0; t < 130; t++) if (trn_schedule_lr(&s, t) != trn_lr_schedule(t, 10, 110, 1.0f, 0.1f)) bad++;
    CHECK(bad == 0, "trn_lr_schedule and the cosine kind differ at %d steps\n", bad);
    CHECK_NEAR(trn_schedule_lr(&s, 60), 0.55f, 1e-6, 0, "cosine halfway");
    CHECK_NEAR(trn_schedule_lr(&s, 110), 0.1f, 0, 0, "cosine at total");
    s.kind = TRN_SCHEDULE_LINEAR;
    CHECK_NEAR(trn_schedule_lr(&s, 60), 0.55f, 1e-6, 0, "linear halfway");
    CHECK_NEAR(trn_schedule_lr(&s, 35), 1.0f - 0.25f * 0.9f, 1e-6, 0, "linear a quarter in");
    CHECK_NEAR(trn_schedule_lr(&s, 500), 0.1f, 0, 0, "linear after total");
    s.kind = TRN_SCHEDULE_CONSTANT;
    CHECK(trn_schedule_lr(&s, 60) == 1.0f && trn_schedule_lr(&s, 500) == 1.0f, "constant\n");
    s.kind = TRN_SCHEDULE_WSD; /* decay_frac 0 -> 0.2: the last 20 of 100 steps decay */
    CHECK(trn_schedule_lr(&s, 89) == 1.0f, "wsd stable at 89: %g\n", trn_schedule_lr(&s, 89));
    CHECK(trn_schedule_lr(&s, 90) == 1.0f, "wsd decay starts at 90 from max: %g\n", trn_schedule_lr(&s, 90));
    CHECK_NEAR(trn_schedule_lr(&s, 100), 0.55f, 1e-6, 0, "wsd halfway through the decay");
    CHECK_NEAR(trn_schedule_lr(&s, 110), 0.1f, 0, 0, "wsd at total");
    s.decay_frac = 0.5f;
    CHECK(trn_schedule_lr(&s, 59) == 1.0f && trn_schedule_lr(&s, 61) < 1.0f, "wsd decay_frac 0.5\n");
    printf("ok - schedules: cosine (= trn_lr_schedule), constant, linear, wsd, each with warmup\n");
}

/* ---- no_grad, eval ------------------------------------------------------- */
static void test_modes(void) {
    trn_model m;
    trn_tensor *w, *x, *y;
    float xs[6] = {1, 2, 3, 4, 5, 6};
    int shape[2] = {2, 3}, was;
    trn_model_init(&m, NULL);
    w = trn_param2(&m, "w", 4, 3);
    trn_model_alloc(&m);
    CHECK(m.training == 1 && m.grad_enabled == 1, "a new model trains with the tape on\n");
    was = trn_no_grad(&m);
    CHECK(was == 1 && m.grad_enabled == 0, "trn_no_grad\n");
    trn_reset(&m);
    x = trn_input(&m, "x", 2, shape, xs);
    y = trn_linear(&m, x, w, NULL);
    CHECK(m.tape_len == 0 && !y->requires_grad, "no_grad recorded %d tape entries\n", m.tape_len);
    CHECK(trn_set_grad_enabled(&m, was) == 0 && m.grad_enabled == 1, "restore\n");
    y = trn_linear(&m, x, w, NULL);
    CHECK(m.tape_len == 1 && y->requires_grad, "the tape is back on\n");
    trn_eval(&m);
    CHECK(m.training == 0 && m.grad_enabled == 1, "eval is not no_grad\n");
    trn_train(&m);
    CHECK(m.training == 1, "train\n");
    printf("ok - trn_no_grad / trn_set_grad_enabled / trn_eval / trn_train\n");
    trn_model_free(&m);
}

/* ---- gradient accumulation ------------------------------------------------ */
/* a 2-layer MLP classifier, N rows of C features, mean cross-entropy */
#define GA_N 12
#define GA_C 5
#define GA_H 7
#define GA_V 4
static float GA_X[GA_N * GA_C];
static int GA_Y[GA_N];

static void mlp_make(trn_model *m, const trn_backend *be) {
    trn_rng rng;
    int i;
    trn_model_init(m, be);
    trn_param2(m, "w1", GA_H, GA_C); trn_param1(m, "b1", GA_H);
    trn_param2(m, "w2", GA_V, GA_H); trn_param1(m, "b2", GA_V);
    trn_model_alloc(m);
    trn_rng_seed(&rng, 11);
    for (i = 0; i < m->n_params; i++) trn_init_normal(m, m->params[i], 0.0f, 0.5f, &rng);
}
static trn_tensor *mlp_loss(trn_model *m, int row0, int rows) {
    int shape[2];
    trn_tensor *x, *h;
    shape[0] = rows; shape[1] = GA_C;
    x = trn_input(m, "x", 2, shape, GA_X + row0 * GA_C);
    h = trn_gelu(m, trn_linear(m, x, trn_model_find(m, "w1"), trn_model_find(m, "b1")));
    return trn_cross_entropy(m, trn_linear(m, h, trn_model_find(m, "w2"), trn_model_find(m, "b2")), GA_Y + row0, GA_V);
}
/* the README's recipe: zero once, then per micro-batch reset, forward,
   backward with scale 1/K; the step sees the mean over all K*rows rows */
static void accumulate(trn_model *m, int K) {
    int k, rows = GA_N / K;
    trn_zero_grad(m);
    for (k = 0; k < K; k++) {
        trn_reset(m);
        trn_backward_scaled(m, mlp_loss(m, k * rows, rows), 1.0f / (float)K);
    }
}

static void test_accumulation(void) {
    trn_model big, micro;
    trn_adamw ob, om;
    float *gb, *gm, *wb, *wm;
    double num = 0, den = 0, wnum = 0;
    size_t i, n;
    int K;
    trn_rng rng;
    trn_rng_seed(&rng, 3);
    for (i = 0; i < GA_N * GA_C; i++) GA_X[i] = trn_rng_normal(&rng);
    for (i = 0; i < GA_N; i++) GA_Y[i] = (int)trn_rng_below(&rng, GA_V);
    mlp_make(&big, NULL);
    n = big.n_floats;
    gb = (float *)malloc(n * 4); gm = (float *)malloc(n * 4); wb = (float *)malloc(n * 4); wm = (float *)malloc(n * 4);
    accumulate(&big, 1);
    memcpy(gb, big.grad_data, n * 4);
    for (K = 2; K <= 4; K++) {
        if (GA_N % K) continue;
        mlp_make(&micro, NULL);
        accumulate(&micro, K);
        memcpy(gm, micro.grad_data, n * 4);
        num = den = 0;
        for (i = 0; i < n; i++) { num += (gm[i] - gb[i]) * (double)(gm[i] - gb[i]); den += gb[i] * (double)gb[i]; }
        CHECK(sqrt(num / den) < 1e-6 && den > 1e-4, "K=%d micro-batches: gradient off by %.3g relative\n", K, sqrt(num / den));
        /* and then the same optimizer step */
        trn_adamw_init(&ob, NULL); trn_adamw_init(&om, NULL);
        trn_model_free(&big);
        mlp_make(&big, NULL);
        accumulate(&big, 1);
        trn_adamw_step(&ob, &big, 1e-2f);
        trn_adamw_step(&om, &micro, 1e-2f);
        memcpy(wb, big.param_data, n * 4); memcpy(wm, micro.param_data, n * 4);
        wnum = 0;
        for (i = 0; i < n; i++) wnum = fmax(wnum, fabs(wm[i] - wb[i]));
        CHECK(wnum < 1e-5, "K=%d: weights after the step differ by %.3g\n", K, wnum);
        printf("ok - gradient accumulation, K=%d micro-batches of %d rows = one batch of %d: gradient rel. diff %.2g\n", K,
               GA_N / K, GA_N, sqrt(num / den));
        trn_adamw_free(&ob); trn_adamw_free(&om);
        trn_model_free(&micro);
    }
    trn_model_free(&big);
    free(gb); free(gm); free(wb); free(wm);
}

/* ---- SGD through a checkpoint ---------------------------------------------- */
static void sgd_steps(trn_model *m, trn_adamw *opt, int from, int to) {
    int s;
    for (s = from; s < to; s++) {
        accumulate(m, 2);
        trn_adamw_step(opt, m, 0.05f * (float)(s + 1) / 4.0f);
    }
}

static void test_sgd_checkpoint(void) {
    trn_model a, b;
    trn_adamw oa, ob;
    trn_adamw_desc d;
    char path[256];
    size_t before;
    memset(&d, 0, sizeof d);
    d.algo = TRN_OPTIM_SGD; d.lr = 0.05f; d.momentum = 0.9f; d.nesterov = 1; d.weight_decay = 1e-3f;
    snprintf(path, sizeof path, "/tmp/test_optim_%ld.safetensors", (long)getpid());
    mlp_make(&a, NULL);
    trn_adamw_init(&oa, &d);
    before = trn_ledger_current(TRN_HOST, TRN_KIND_OPTIM);
    sgd_steps(&a, &oa, 0, 3);
    CHECK(trn_ledger_current(TRN_HOST, TRN_KIND_OPTIM) - before == a.n_floats * sizeof(float),
          "SGD momentum: one buffer of optimizer state\n");
    CHECK(trn_checkpoint_save(path, &a, &oa, NULL) == TRN_OK, "save: %s\n", trn_error_reason());
    /* a fresh model and an AdamW optimizer: the checkpoint says SGD */
    mlp_make(&b, NULL);
    trn_adamw_init(&ob, NULL);
    CHECK(trn_checkpoint_load(path, &b, &ob, NULL) == TRN_OK, "load: %s\n", trn_error_reason());
    CHECK(ob.desc.algo == TRN_OPTIM_SGD && ob.desc.momentum == 0.9f && ob.desc.nesterov == 1 && ob.step == 3 && !ob.v,
          "restored optimizer: algo %d momentum %g nesterov %d step %lld\n", (int)ob.desc.algo, ob.desc.momentum,
          ob.desc.nesterov, ob.step);
    CHECK(ob.m && memcmp(ob.m, oa.m, a.n_floats * 4) == 0, "momentum buffer not restored\n");
    sgd_steps(&a, &oa, 3, 7);
    sgd_steps(&b, &ob, 3, 7);
    CHECK(memcmp(a.param_data, b.param_data, a.n_floats * 4) == 0 && memcmp(oa.m, ob.m, a.n_floats * 4) == 0,
          "SGD resumed from a checkpoint is not bit-exact\n");
    printf("ok - SGD (Nesterov) checkpoint: momentum buffer saved, resume bit for bit\n");
    /* and an AdamW checkpoint loaded into an SGD optimizer becomes AdamW */
    trn_adamw_free(&oa);
    trn_adamw_init(&oa, NULL);
    sgd_steps(&a, &oa, 0, 1);
    CHECK(trn_checkpoint_save(path, &a, &oa, NULL) == TRN_OK, "save adamw: %s\n", trn_error_reason());
    CHECK(trn_checkpoint_load(path, &b, &ob, NULL) == TRN_OK, "load adamw: %s\n", trn_error_reason());
    CHECK(ob.desc.algo == TRN_OPTIM_ADAMW && ob.m && ob.v && memcmp(ob.v, oa.v, a.n_floats * 4) == 0,
          "AdamW state after an SGD optimizer loaded it\n");
    unlink(path);
    trn_adamw_free(&oa); trn_adamw_free(&ob);
    trn_model_free(&a); trn_model_free(&b);
}

/* the AdamW kernel (vectorized) against its plain loop: the same formula
   with the same roundings, so the same bits (ISO C: no contraction) */
static void test_adamw_kernel_ref(void) {
    enum { N = 1003 }; /* vectors and a tail */
    static float p[N], g[N], m[N], v[N], pr[N], mr[N], vr[N];
    trn_rng rng;
    int i, k, same = 1;
    trn_rng_seed(&rng, 9);
    for (i = 0; i < N; i++) {
        p[i] = pr[i] = trn_rng_normal(&rng);
        m[i] = mr[i] = 0.1f * trn_rng_normal(&rng);
        v[i] = vr[i] = 0.01f * trn_rng_uniform(&rng);
    }
    for (k = 1; k <= 3; k++) {
        float b1 = 1.0f - powf(0.9f, (float)k), b2 = 1.0f - powf(0.95f, (float)k);
        for (i = 0; i < N; i++) g[i] = trn_rng_normal(&rng);
        trn_adamw_update(p, g, m, v, N, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, b1, b2);
        trn_adamw_update_ref(pr, g, mr, vr, N, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, b1, b2);
    }
    for (i = 0; i < N; i++) same &= p[i] == pr[i] && m[i] == mr[i] && v[i] == vr[i];
    CHECK(same, "trn_adamw_update == trn_adamw_update_ref, bit for bit, 3 steps of %d elements\n", N);
}

int main(void) {
    trn_set_threads(2);
    test_sgd_rule(0.0f, 0.0f, 0.0f, 0);
    test_sgd_rule(0.9f, 0.0f, 0.0f, 0);
    test_sgd_rule(0.9f, 0.1f, 0.01f, 0);
    test_sgd_rule(0.8f, 0.0f, 0.05f, 1);
    test_sgd_invalid();
    test_decay_and_groups();
    test_schedules();
    test_modes();
    test_accumulation();
    test_sgd_checkpoint();
    test_adamw_kernel_ref();
    return check_summary();
}
