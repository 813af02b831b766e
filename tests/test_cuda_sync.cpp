// build: -O1 -g1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined -Wno-maybe-uninitialized
// requires: test -f examples/gpt2.c
/* tests/test_cuda_sync.cpp - a CUDA training step waits for the device
   once: the harness (tests/cuda_on_cpu.h) counts every call that would make
   the host wait on a GPU (cuemu::host_syncs), and this test holds a GPT-2
   step of examples/gpt2.c's model to that one wait (trn_sync, which hands
   over the step's loss and gradient norm).

   The step:  trn_zero_grad, trn_reset, forward + loss, trn_item_async,
              trn_backward, trn_clip_grad_norm_async, trn_adamw_step,
              trn_sync
   and the same with two micro-batches of gradient accumulation.

   It also checks the pieces of that step against the CPU backend:
   - adamw_flat (one launch over the flat buffers, runs of decay / no decay
     / frozen, the clip factor read from device memory; 10007 elements,
     and 2.1M so that threads walk from run to run) against
     trn_adamw_update on gradients scaled on the host first: |diff| <= 1e-6
     relative, gradients stored back exactly (g*s), frozen runs untouched;
   - grad_norm_clip: the norm as sqrt(trn_sum_squares) (1e-6 relative), the
     factor exactly as trn_clip_grad_norm computes it from that norm;
   - mean (a loss from its rows): 1e-6 relative;
   - download_async lands at trn_sync, not before; an upload's host buffer
     can be reused at once (it was staged);
   - 9 GPT-2 steps on both backends: loss and gradient norm within 1e-4
     (fp32, TF32 off), as tests/test_cuda_gpt2.cpp.

   tests/test_cuda_sync_gpu.cu is this file compiled by nvcc: the same
   checks on a real GPU, where the copies really are asynchronous (a
   staging buffer reused too early or a readback handed over before its
   copy ended shows there as a wrong loss); the counts need the harness. */
#ifndef __CUDACC__
#define TRN_CUDA_FLASH_HS(X) /* no bf16 attention here: its kernels are not compiled (train_cuda.h) */
#include "tests/cuda_on_cpu.h"
#endif
#define TRN_USE_CUDA
#define TRAIN_CUDA_IMPLEMENTATION
#define GPT2_NO_MAIN
#include "examples/gpt2.c"
#include "tests/check.h"

#include <vector>

/* host waits so far, by kind (the harness counts them; a GPU cannot) */
#ifdef TRN_CUDA_ON_CPU
enum { N_SYNC_KINDS = cuemu::SYNC_KINDS };
static long host_waits(long *by_kind) {
    if (by_kind) memcpy(by_kind, cuemu::sync_count().by_kind, sizeof(long) * N_SYNC_KINDS);
    return cuemu::host_syncs();
}
static const char *wait_kind(int k) { return cuemu::sync_kind_name(k); }
#else
enum { N_SYNC_KINDS = 1 };
static long host_waits(long *by_kind) {
    if (by_kind) by_kind[0] = 0;
    return -1;
}
static const char *wait_kind(int k) { return "?"; }
#endif

typedef std::vector<float> vec;
static const trn_backend *GPU, *CPU;
static trn_rng RNG;

static vec randn(size_t n, float scale) {
    vec v(n);
    for (size_t i = 0; i < n; i++) v[i] = scale * trn_rng_normal(&RNG);
    return v;
}
static float *dev_from(const vec &h) {
    float *p = (float *)GPU->alloc(h.size() * sizeof(float), TRN_KIND_TEMP);
    if (!p) trn_fatal("test: %s", trn_error_reason());
    GPU->upload(p, h.data(), h.size() * sizeof(float));
    return p;
}
static vec host_from(const float *d, size_t n) {
    vec h(n);
    GPU->download(h.data(), d, n * sizeof(float));
    return h;
}
static double max_rel(const vec &a, const vec &b) {
    double w = 0;
    for (size_t i = 0; i < a.size(); i++) w = fmax(w, fabs((double)a[i] - b[i]) / (1.0 + fabs((double)b[i])));
    return w;
}

/* ---- adamw_flat against trn_adamw_update with pre-scaled gradients ---- */
/* n: 10007 (one element per thread: each finds its run by bisection) or
   more than the largest grid (8192 blocks of 256) covers, so threads go on
   to later elements and step from run to run; `far` puts runs there too */
static void check_adamw_flat(float clip_factor, int with_clip, size_t n, size_t far) {
    /* runs: decay, no decay, frozen, decay, no decay, frozen, decay (ends
       relative to 0) */
    enum { nseg = 7 };
    trn_adamw_seg seg[nseg] = {{3001, TRN_ADAMW_DECAY},    {3770, TRN_ADAMW_NO_DECAY}, {5000, TRN_ADAMW_SKIP},
                               {far + 9, TRN_ADAMW_DECAY}, {far + 40, TRN_ADAMW_NO_DECAY},
                               {far + 77, TRN_ADAMW_SKIP}, {n, TRN_ADAMW_DECAY}};
    const float lr = 3e-3f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f, bc1 = 0.271f, bc2 = 0.0975f;
    vec p = randn(n, 1.0f), g = randn(n, 0.5f), m = randn(n, 0.1f), v(n);
    for (size_t i = 0; i < n; i++) v[i] = fabsf(trn_rng_normal(&RNG)) * 0.01f;
    float *dp = dev_from(p), *dg = dev_from(g), *dm = dev_from(m), *dv = dev_from(v);
    float *dclip = dev_from(vec(1, clip_factor));
    GPU->adamw_flat(dp, dg, dm, dv, n, seg, nseg, lr, b1, b2, eps, wd, bc1, bc2, with_clip ? dclip : NULL, NULL);
    vec gp = host_from(dp, n), gg = host_from(dg, n), gm = host_from(dm, n), gv = host_from(dv, n);
    /* the CPU: scale the gradients first (as trn_clip_grad_norm, but not
       those of frozen runs: adamw_flat does not touch them), then one
       trn_adamw_update per run, weight decay where the run says so */
    vec cp = p, cg = g, cm = m, cv = v;
    size_t start = 0;
    for (int r = 0; r < nseg; r++) {
        if (with_clip && clip_factor != 1.0f && seg[r].mode != TRN_ADAMW_SKIP)
            trn_scale(cg.data() + start, clip_factor, seg[r].end - start);
        if (seg[r].mode != TRN_ADAMW_SKIP)
            trn_adamw_update(cp.data() + start, cg.data() + start, cm.data() + start, cv.data() + start,
                             seg[r].end - start, lr, b1, b2, eps, seg[r].mode == TRN_ADAMW_DECAY ? wd : 0.0f, bc1, bc2);
        start = seg[r].end;
    }
    char what[128];
    snprintf(what, sizeof what, "adamw_flat n=%zu clip %s %.3g", n, with_clip ? "on" : "off", clip_factor);
    double dpar = max_rel(gp, cp), dmom = fmax(max_rel(gm, cm), max_rel(gv, cv));
    printf("  %-44s params %.3g  moments %.3g\n", what, dpar, dmom);
    CHECK(dpar <= 1e-6, "%s: params differ by %.3g\n", what, dpar);
    CHECK(dmom <= 1e-6, "%s: moments differ by %.3g\n", what, dmom);
    CHECK(memcmp(gg.data(), cg.data(), n * sizeof(float)) == 0, "%s: gradients not stored back as g*s\n", what);
    int untouched = 1;
    for (int r = 0; r < nseg; r++)
        for (size_t i = r ? seg[r - 1].end : 0; i < seg[r].end && seg[r].mode == TRN_ADAMW_SKIP; i++)
            untouched &= gp[i] == p[i] && gm[i] == m[i] && gv[i] == v[i] && gg[i] == g[i];
    CHECK(untouched, "%s: a frozen run was written\n", what);
    GPU->free(dp); GPU->free(dg); GPU->free(dm); GPU->free(dv); GPU->free(dclip);
}

/* ---- grad_norm_clip and mean ---------------------------------------- */
static void check_norm_and_mean(void) {
    const size_t n = 300007;
    vec g = randn(n, 0.01f);
    float *dg = dev_from(g), *stat = (float *)GPU->alloc(2 * sizeof(float), TRN_KIND_TEMP);
    float want = (float)sqrt(trn_sum_squares(g.data(), n));
    float maxes[3] = {0.5f * want, 2.0f * want, 0.0f}; /* clips, does not, off */
    for (int k = 0; k < 3; k++) {
        GPU->grad_norm_clip(stat, dg, n, maxes[k]);
        vec s = host_from(stat, 2);
        float f = maxes[k] > 0.0f && s[0] > maxes[k] ? maxes[k] / (s[0] + 1e-6f) : 1.0f;
        CHECK_NEAR(s[0], want, 0, 1e-6, "grad_norm_clip: the norm");
        CHECK(s[1] == f, "grad_norm_clip: factor %.9g, trn_clip_grad_norm's %.9g (max_norm %g)\n", s[1], f, maxes[k]);
        if (k == 0) CHECK(s[1] < 1.0f, "grad_norm_clip: no clipping at max_norm = norm/2\n");
    }
    vec x = randn(16411, 2.0f);
    float *dx = dev_from(x), *dmean = (float *)GPU->alloc(sizeof(float), TRN_KIND_TEMP), cm;
    GPU->mean(dmean, dx, x.size());
    CPU->mean(&cm, x.data(), x.size());
    CHECK_NEAR(host_from(dmean, 1)[0], cm, 1e-7, 1e-6, "mean");
    GPU->free(dg); GPU->free(stat); GPU->free(dx); GPU->free(dmean);
}

/* ---- the copies: async readback lands at sync; uploads are staged ----- */
static void check_copies(void) {
    vec a = randn(1000, 1.0f);
    float *d = dev_from(a), got[2] = {-1.0f, -1.0f};
    GPU->download_async(&got[0], d + 7, sizeof(float));
    GPU->download_async(&got[1], d + 999, sizeof(float));
    CHECK(got[0] == -1.0f && got[1] == -1.0f, "download_async wrote its destination before sync\n");
    GPU->sync();
    CHECK(got[0] == a[7] && got[1] == a[999], "download_async: got %g %g, want %g %g\n", got[0], got[1], a[7], a[999]);
    /* the host buffer of an upload is free again at once */
    vec b = randn(1000, 1.0f), keep = b;
    GPU->upload(d, b.data(), b.size() * sizeof(float));
    for (float &x : b) x = 12345.0f;
    CHECK(host_from(d, 1000) == keep, "an upload read its host buffer after returning\n");
    GPU->free(d);
}

/* ---- GPT-2 steps: one host wait each ---------------------------------- */
static long step_syncs(long before, const long *kinds_before, char *why, size_t n) {
    long kinds[N_SYNC_KINDS], d = host_waits(kinds) - before;
    why[0] = 0;
    for (int k = 0; k < N_SYNC_KINDS; k++) {
        long c = kinds[k] - kinds_before[k];
        if (c) snprintf(why + strlen(why), n - strlen(why), "%s%ld x %s", why[0] ? ", " : "", c, wait_kind(k));
    }
    return d;
}

static void check_gpt2_steps(void) {
    const preset *p = find_preset("tiny");
    CHECK(p != NULL, "examples/gpt2.c has no 'tiny' preset\n");
    if (!p) return;
    gpt2_config cfg = p->cfg;
    const int B = 3, T = 29, steps = 6, accum_steps = 3;
    gpt2 gc, gg;
    CHECK(gpt2_create(&gc, &cfg, NULL) == TRN_OK, "gpt2_create cpu: %s\n", trn_error_reason());
    CHECK(gpt2_create(&gg, &cfg, trn_cuda_backend()) == TRN_OK, "gpt2_create cuda: %s\n", trn_error_reason());
    gpt2_init_weights(&gc, 42);
    gpt2_init_weights(&gg, 42);
    trn_adamw_desc d;
    memset(&d, 0, sizeof d);
    d.lr = 3e-3f;
    d.weight_decay = 0.1f;
    trn_adamw oc, og;
    trn_adamw_init(&oc, &d);
    trn_adamw_init(&og, &d);
    const char *text = "the kit trains on the cpu and on cuda with the same code. ";
    int len = (int)strlen(text);
    std::vector<int> x((size_t)B * T), y((size_t)B * T);
    double worst_loss = 0, worst_norm = 0;
    printf("examples/gpt2.c 'tiny', B=%d T=%d: host waits per training step%s\n", B, T,
           host_waits(NULL) < 0 ? " (counted only by the harness: -1 here)" : "");
    /* the first `steps` steps: one micro-batch; then `accum_steps` with two */
    for (int s = 0; s < steps + accum_steps; s++) {
        int micro = s < steps ? 1 : 2;
        float loss[2][2], norm[2];
        gpt2 *gs[2] = {&gc, &gg};
        trn_adamw *os[2] = {&oc, &og};
        long before = 0, kinds[N_SYNC_KINDS], n_sync = 0;
        char why[256];
        for (int k = 0; k < 2; k++) {
            trn_model *m = &gs[k]->m;
            if (k == 1) before = host_waits(kinds);
            trn_zero_grad(m);
            for (int mb = 0; mb < micro; mb++) {
                trn_rng rb; /* the same batch on both backends */
                trn_rng_seed(&rb, (uint64_t)(1000 * s + mb));
                for (int b = 0; b < B; b++) {
                    int o = (int)trn_rng_below(&rb, (uint32_t)len);
                    for (int t = 0; t < T; t++) {
                        x[(size_t)(b * T + t)] = (unsigned char)text[(o + t) % len];
                        y[(size_t)(b * T + t)] = (unsigned char)text[(o + t + 1) % len];
                    }
                }
                trn_reset(m);
                trn_tensor *l = gpt2_loss(gs[k], x.data(), y.data(), B, T);
                trn_item_async(m, l, &loss[k][mb]);
                trn_backward(m, l);
            }
            if (micro > 1) m->backend->scale(m->grad_data, 1.0f / (float)micro, m->n_floats);
            trn_clip_grad_norm_async(m, 1.0f, &norm[k]);
            CHECK(trn_adamw_step(os[k], m, 3e-3f) == TRN_OK, "adamw: %s\n", trn_error_reason());
            trn_sync(m);
            if (k == 1) n_sync = step_syncs(before, kinds, why, sizeof why);
        }
        float lc = 0, lg = 0;
        for (int mb = 0; mb < micro; mb++) { lc += loss[0][mb] / (float)micro; lg += loss[1][mb] / (float)micro; }
        worst_loss = fmax(worst_loss, fabs((double)lc - lg));
        worst_norm = fmax(worst_norm, fabs((double)norm[0] - norm[1]) / norm[0]);
        printf("  step %d (%d micro-batch%s)  loss cpu %.6f cuda %.6f  norm cpu %.5f cuda %.5f  host waits %ld%s%s%s\n", s,
               micro, micro > 1 ? "es" : "", lc, lg, norm[0], norm[1], n_sync, why[0] ? " (" : "", why, why[0] ? ")" : "");
        /* the first two steps allocate (the arena settles at the second
           trn_reset, which frees its spill blocks: cudaFree waits) */
        if (s >= 2 && before >= 0)
            CHECK(n_sync == 1, "step %d: %ld host waits (%s), want exactly 1 (trn_sync)\n", s, n_sync, why);
    }
    CHECK(worst_loss <= 1e-4, "loss differs by %.3g\n", worst_loss);
    CHECK(worst_norm <= 1e-4, "grad norm differs by %.3g (relative)\n", worst_norm);

    /* the counter counts: the synchronous calls wait, each at least once */
    long before = host_waits(NULL);
    trn_reset(&gg.m);
    float v = trn_item(&gg.m, gpt2_loss(&gg, x.data(), y.data(), B, T));
    if (before >= 0) CHECK(host_waits(NULL) > before, "trn_item did not count as a host wait\n");
    before = host_waits(NULL);
    float n2 = trn_grad_norm(&gg.m);
    if (before >= 0) CHECK(host_waits(NULL) > before, "trn_grad_norm did not count as a host wait\n");
    printf("  (trn_item %.4f and trn_grad_norm %.4f wait: they return host values)\n", v, n2);
    trn_adamw_free(&oc);
    trn_adamw_free(&og);
    gpt2_free(&gc);
    gpt2_free(&gg);
}

int main(void) {
    trn_set_threads(1);
    trn_cuda_set_tf32(0);
    if (trn_cuda_init(0) != TRN_OK) {
#ifdef TRN_CUDA_ON_CPU
        printf("cuda init: %s\n", trn_error_reason());
        return 1;
#else
        printf("%s: nothing to test here (the harness build, tests/bin/test_cuda_sync, runs these checks)\n",
               trn_error_reason());
        return check_summary();
#endif
    }
    GPU = trn_cuda_backend();
    CPU = trn_cpu_backend();
    trn_rng_seed(&RNG, 7);
    printf("kernels of the sync-free step against the CPU:\n");
    const size_t big = (size_t)8192 * 256 + 50021; /* beyond one grid-stride pass */
    check_adamw_flat(0.37f, 1, 10007, 6000);
    check_adamw_flat(1.0f, 1, 10007, 6000);
    check_adamw_flat(0.37f, 0, 10007, 6000);
    check_adamw_flat(0.37f, 1, big, (size_t)8192 * 256 + 3001);
    check_norm_and_mean();
    check_copies();
    check_gpt2_steps();
    CHECK(harness_errors() == 0, "the harness reported %ld errors\n", harness_errors());
    trn_cuda_shutdown();
    return check_summary();
}
