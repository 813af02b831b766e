// build: -O1 -g1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined -Wno-maybe-uninitialized
// requires: test -f examples/gpt2.c
/* tests/test_cuda_loop.cpp - train_cuda.h's parts of train.h's loop
   pieces, with the CUDA kernels run on the CPU by tests/cuda_on_cpu.h:
     - an async checkpoint of a model on the CUDA backend, staged in pinned
       host memory (trn_cuda_host_alloc), is byte-identical to a synchronous
       save of the same state, and its staging is counted as host "staging"
       bytes and given back;
     - --profile with CUDA events (trn_cuda_profile_clock): one pass per
       backward, a row per op kind with forward and backward counts, the
       clock named in the table. (On a real GPU the same code times the
       kernels; tests/gpu/run.sh runs examples/gpt2_cuda --profile.) */
#define TRN_CUDA_FLASH_HS(X) /* no bf16 attention here: its kernels are not compiled (train_cuda.h) */
#include "tests/cuda_on_cpu.h"
#define TRN_USE_CUDA
#define TRAIN_CUDA_IMPLEMENTATION
#define GPT2_NO_MAIN
#include "examples/gpt2.c"
#include "tests/check.h"

#include <vector>

static bool same_file(const char *a, const char *b) {
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    bool same = fa && fb;
    while (same) {
        int x = fgetc(fa), y = fgetc(fb);
        if (x != y) same = false;
        if (x == EOF || y == EOF) break;
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return same;
}

int main(void) {
    const preset *p = find_preset("tiny");
    CHECK(p != NULL, "examples/gpt2.c has no 'tiny' preset\n");
    if (!p) return check_summary();
    gpt2_config cfg = p->cfg;
    const int B = 2, T = 16;
    trn_set_threads(1);
    if (trn_cuda_init(0) != TRN_OK) { printf("cuda init: %s\n", trn_error_reason()); return 1; }
    gpt2 g;
    CHECK(gpt2_create(&g, &cfg, trn_cuda_backend()) == TRN_OK, "gpt2_create cuda: %s\n", trn_error_reason());
    gpt2_init_weights(&g, 42);
    trn_adamw opt;
    trn_adamw_init(&opt, NULL);
    std::vector<int> x((size_t)B * T), y((size_t)B * T);
    for (int i = 0; i < B * T; i++) { x[i] = (7 * i) % cfg.vocab_size; y[i] = (7 * i + 7) % cfg.vocab_size; }

    trn_profile prof;
    trn_profile_attach(&prof, &g.m);
    trn_cuda_profile_clock(&prof);
    for (int s = 0; s < 2; s++) {
        trn_zero_grad(&g.m);
        trn_reset(&g.m);
        trn_tensor *l = gpt2_loss(&g, x.data(), y.data(), B, T);
        trn_backward(&g.m, l);
        CHECK(trn_adamw_step(&opt, &g.m, 1e-3f) == TRN_OK, "adamw: %s\n", trn_error_reason());
    }
    CHECK(prof.passes == 2, "two passes profiled: %lld\n", prof.passes);
    int lin = -1, att = -1;
    for (int r = 0; r < prof.n_rows; r++) {
        if (!strcmp(prof.rows[r].op, "linear")) lin = r;
        if (!strcmp(prof.rows[r].op, "attention")) att = r;
    }
    CHECK(lin >= 0 && att >= 0, "rows for linear and attention\n");
    if (lin >= 0 && att >= 0) {
        CHECK(prof.rows[att].calls[0] == 2 * cfg.n_layer && prof.rows[att].calls[1] == 2 * cfg.n_layer,
              "attention: %lld forward, %lld backward calls\n", prof.rows[att].calls[0], prof.rows[att].calls[1]);
        CHECK(prof.rows[lin].ms[0] >= 0 && prof.rows[lin].ms[1] >= 0 && prof.rows[lin].bytes[0] > 0, "linear: times, bytes\n");
    }
    FILE *f = tmpfile();
    trn_profile_print(&prof, f);
    rewind(f);
    char buf[4096];
    buf[fread(buf, 1, sizeof buf - 1, f)] = 0;
    fclose(f);
    CHECK(strstr(buf, "CUDA events") != NULL, "the table names its clock:\n%s\n", buf);
    trn_profile_free(&prof);
    CHECK(g.m.profile == NULL, "detached\n");

    char base[] = "/tmp/trn_test_cuda_loop_XXXXXX", da[300], db[300], pa[400], pb[400];
    CHECK(mkdtemp(base) != NULL, "mkdtemp\n");
    snprintf(da, sizeof da, "%s/async", base);
    snprintf(db, sizeof db, "%s/sync", base);
    trn_meta meta;
    memset(&meta, 0, sizeof meta);
    trn_meta_set(&meta, "note", "cuda");
    CHECK(trn_checkpoint_save_dir(db, 2, 0, &g.m, &opt, &meta, pb, sizeof pb) == TRN_OK, "sync save: %s\n", trn_error_reason());
    trn_ckpt_async ack;
    memset(&ack, 0, sizeof ack);
    ack.host_alloc = trn_cuda_host_alloc;
    ack.host_free = trn_cuda_host_free;
    size_t before = trn_ledger_current(TRN_HOST, TRN_KIND_STAGING);
    CHECK(trn_checkpoint_save_async(&ack, da, 2, &g.m, &opt, &meta) == TRN_OK, "async save: %s\n", trn_error_reason());
    size_t staged = (g.m.n_floats + 2 * (opt.hi - opt.lo)) * sizeof(float);
    CHECK(trn_ledger_current(TRN_HOST, TRN_KIND_STAGING) - before == staged, "pinned staging counted: %zu bytes\n",
          trn_ledger_current(TRN_HOST, TRN_KIND_STAGING) - before);
    /* training goes on on the device while the thread writes */
    trn_zero_grad(&g.m);
    trn_reset(&g.m);
    trn_backward(&g.m, gpt2_loss(&g, x.data(), y.data(), B, T));
    CHECK(trn_adamw_step(&opt, &g.m, 1e-3f) == TRN_OK, "adamw\n");
    CHECK(trn_checkpoint_wait(&ack) == TRN_OK, "wait: %s\n", trn_error_reason());
    snprintf(pa, sizeof pa, "%s/ckpt_00000002.safetensors", da);
    CHECK(same_file(pa, pb), "async (pinned staging) and sync saves of the same state are byte-identical\n");
    trn_ckpt_async_free(&ack);
    CHECK(trn_ledger_current(TRN_HOST, TRN_KIND_STAGING) == before, "pinned staging given back\n");
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", base);
    if (system(cmd) != 0) printf("could not remove %s\n", base);
    trn_adamw_free(&opt);
    gpt2_free(&g);
    trn_cuda_shutdown();
    return check_summary();
}
