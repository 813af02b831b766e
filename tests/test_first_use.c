/* test_first_use.c - what a new user runs into when writing a first
   program with train.h:
     - misuse stops with one message that names the call (trn_fatal, exit
       code 3; each case runs in a child process): forgetting
       trn_model_alloc, trn_input / trn_mse with NULL data, a second
       trn_backward on the same tape
     - the ledger after step 1: with the peaks reset at the start of each
       later step, every kind's current and peak bytes stay exactly where
       step 1 left them (no per-step allocation anywhere: the README's
       "from the second step on, nothing moves")
     - trn_mkdirs creates parents, accepts an existing directory, refuses
       a file
     - trn_omp_wait_passive sets OMP_WAIT_POLICY=passive (re-executing the
       program) unless the user set it */
#define TRAIN_IMPLEMENTATION
#include "train.h"
#include "check.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* --- misuse: run fn in a child, expect exit 3 and a message with both words */
typedef struct { void (*fn)(void); } misuse;
static void call(void *m) { ((misuse *)m)->fn(); }
static void expect_fatal(const char *what, void (*fn)(void), const char *word1, const char *word2) {
    char buf[1024];
    misuse m = {fn};
    check_fatal(what, call, &m, word1, word2, buf, sizeof buf);
}

static trn_model mm;
static trn_tensor *mw, *mb;
static int shape_x[2] = {4, 3};
static float xs[12], ts[8];

static void declare(void) {
    trn_model_init(&mm, NULL);
    mw = trn_param2(&mm, "fc.weight", 2, 3);
    mb = trn_param1(&mm, "fc.bias", 2);
}
static void no_alloc_init(void) {
    trn_rng rng;
    declare();
    trn_rng_seed(&rng, 1);
    trn_init_normal(&mm, mw, 0.0f, 0.02f, &rng);
}
static void no_alloc_forward(void) {
    declare();
    trn_reset(&mm);
    trn_linear(&mm, trn_input(&mm, "x", 2, shape_x, xs), mw, mb);
}
static void input_null(void) {
    declare();
    trn_model_alloc(&mm);
    trn_input(&mm, "x", 2, shape_x, NULL);
}
static void mse_null(void) {
    declare();
    trn_model_alloc(&mm);
    trn_mse(&mm, trn_linear(&mm, trn_input(&mm, "x", 2, shape_x, xs), mw, mb), NULL);
}
static void backward_twice(void) {
    trn_tensor *loss;
    declare();
    trn_model_alloc(&mm);
    trn_reset(&mm);
    loss = trn_mse(&mm, trn_linear(&mm, trn_input(&mm, "x", 2, shape_x, xs), mw, mb), ts);
    trn_backward(&mm, loss);
    trn_backward(&mm, loss);
}
static void backward_once(void) { /* the control: the right order exits 0 */
    trn_tensor *loss;
    declare();
    trn_model_alloc(&mm);
    trn_reset(&mm);
    loss = trn_mse(&mm, trn_linear(&mm, trn_input(&mm, "x", 2, shape_x, xs), mw, mb), ts);
    trn_backward(&mm, loss);
    trn_reset(&mm);
    loss = trn_mse(&mm, trn_linear(&mm, trn_input(&mm, "x", 2, shape_x, xs), mw, mb), ts);
    trn_backward(&mm, loss);
    exit(0);
}

static void test_misuse(void) {
    int status = 0;
    pid_t pid;
    expect_fatal("forgot trn_model_alloc, then init", no_alloc_init, "trn_init_normal", "trn_model_alloc");
    expect_fatal("forgot trn_model_alloc, then forward", no_alloc_forward, "trn_model_alloc", "trn_param");
    expect_fatal("trn_input with NULL data", input_null, "trn_input", "NULL");
    expect_fatal("trn_mse with NULL target", mse_null, "trn_mse", "target is NULL");
    expect_fatal("a second trn_backward on one tape", backward_twice, "trn_backward", "already ran");
    fflush(stdout);
    pid = fork();
    if (pid == 0) backward_once();
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "reset + forward between backwards is fine (status %d)\n", status);
}

/* --- the ledger: nothing moves after step 1 -------------------------------- */
static void test_ledger_still(void) {
    enum { B = 8, T = 16, C = 32, V = 50 };
    trn_model m;
    trn_adamw opt;
    trn_rng rng;
    trn_tensor *wte, *wpe, *ln_w, *ln_b, *fc, *proj, *head;
    trn_ledger_snapshot after1, now;
    int ids[B * T], tgt[B * T], step, p, k, moved = 0;
    float target[B * T * C];
    trn_model_init(&m, NULL);
    wte = trn_param2(&m, "wte", V, C);
    wpe = trn_param2(&m, "wpe", T, C);
    ln_w = trn_param1(&m, "ln.w", C);
    ln_b = trn_param1(&m, "ln.b", C);
    fc = trn_param2(&m, "fc", 3 * C, C);
    proj = trn_param2(&m, "proj", C, C);
    head = trn_param2(&m, "head", V, C);
    CHECK(trn_model_alloc(&m) == TRN_OK, "alloc\n");
    trn_rng_seed(&rng, 7);
    trn_init_normal(&m, wte, 0, 0.1f, &rng);
    trn_init_normal(&m, wpe, 0, 0.1f, &rng);
    trn_init_const(&m, ln_w, 1.0f);
    trn_init_normal(&m, fc, 0, 0.1f, &rng);
    trn_init_normal(&m, proj, 0, 0.1f, &rng);
    trn_init_normal(&m, head, 0, 0.1f, &rng);
    trn_adamw_init(&opt, NULL);
    for (k = 0; k < B * T; k++) ids[k] = (int)trn_rng_below(&rng, V), tgt[k] = (int)trn_rng_below(&rng, V);
    for (k = 0; k < B * T * C; k++) target[k] = trn_rng_normal(&rng);
    for (step = 1; step <= 5; step++) {
        trn_tensor *x, *h, *loss;
        int pos[B * T];
        if (step > 1) trn_ledger_reset_peak(); /* this step's own high-water mark */
        for (k = 0; k < B * T; k++) pos[k] = k % T;
        trn_zero_grad(&m);
        trn_reset(&m);
        x = trn_add(&m, trn_embedding(&m, wte, ids, B, T), trn_embedding(&m, wpe, pos, B, T));
        h = trn_layernorm(&m, x, ln_w, ln_b);
        h = trn_linear(&m, trn_attention(&m, trn_linear(&m, h, fc, NULL), 4, 1), proj, NULL);
        h = trn_add(&m, x, trn_gelu(&m, h));
        /* two losses added: cross-entropy and mse (both go through the loss mean) */
        loss = trn_add(&m, trn_cross_entropy(&m, trn_linear(&m, h, head, NULL), tgt, V), trn_mse(&m, h, target));
        trn_backward(&m, loss);
        trn_clip_grad_norm(&m, 1.0f);
        CHECK(trn_adamw_step(&opt, &m, 1e-3f) == TRN_OK, "adamw\n");
        if (step == 1) { trn_ledger_read(&after1); continue; }
        trn_ledger_read(&now);
        for (p = 0; p < TRN_PLACE_COUNT; p++)
            for (k = 0; k < TRN_KIND_COUNT; k++) {
                if (now.current[p][k] != after1.current[p][k] || now.peak[p][k] != after1.current[p][k]) {
                    moved++;
                    printf("  step %d: %s %s: current %zu peak %zu, after step 1 %zu\n", step, p == TRN_HOST ? "host" : "device",
                           trn_kind_name((trn_kind)k), now.current[p][k], now.peak[p][k], after1.current[p][k]);
                }
            }
    }
    CHECK(moved == 0, "after step 1, no kind's current or per-step peak moved (%d changes)\n", moved);
    CHECK(after1.current[TRN_HOST][TRN_KIND_OPTIM] == 2 * m.n_floats * sizeof(float), "m and v: %zu bytes\n",
          after1.current[TRN_HOST][TRN_KIND_OPTIM]);
    trn_adamw_free(&opt);
    trn_model_free(&m);
}

/* --- trn_mkdirs ----------------------------------------------------------------- */
static void test_mkdirs(void) {
    char dir[] = "/tmp/trn_first_use_XXXXXX", path[256];
    struct stat st;
    FILE *f;
    if (!mkdtemp(dir)) { CHECK(0, "mkdtemp: %s\n", strerror(errno)); return; }
    snprintf(path, sizeof path, "%s/runs/a/b", dir);
    CHECK(trn_mkdirs(path) == TRN_OK, "trn_mkdirs %s: %s\n", path, trn_error_reason());
    CHECK(stat(path, &st) == 0 && S_ISDIR(st.st_mode), "%s is a directory\n", path);
    CHECK(trn_mkdirs(path) == TRN_OK, "again: fine\n");
    snprintf(path, sizeof path, "%s/runs/a/b/", dir);
    CHECK(trn_mkdirs(path) == TRN_OK, "with a trailing slash: %s\n", trn_error_reason());
    snprintf(path, sizeof path, "%s/file", dir);
    f = fopen(path, "w");
    if (f) fclose(f);
    CHECK(trn_mkdirs(path) == TRN_ERR_IO && strstr(trn_error_reason(), "not a directory"), "a file: %s\n", trn_error_reason());
    snprintf(path, sizeof path, "%s/file/sub", dir);
    CHECK(trn_mkdirs(path) == TRN_ERR_IO, "below a file: %s\n", trn_error_reason());
    CHECK(trn_mkdirs("") == TRN_ERR_INVALID, "empty path\n");
    snprintf(path, sizeof path, "rm -rf '%s'", dir);
    CHECK(system(path) == 0, "cleanup\n");
}

/* --- trn_omp_wait_passive: run this program again, it prints the policy --- */
static void test_wait_policy(const char *self) {
    char cmd[1200], out[64] = "";
    FILE *p;
    const char *want[2] = {"passive", "active"};
    const char *env[2] = {"env -u OMP_WAIT_POLICY", "env OMP_WAIT_POLICY=active"};
    int i;
#if !defined(_OPENMP) || !defined(__linux__)
    want[0] = "(unset)"; /* nothing to do without OpenMP */
#endif
    for (i = 0; i < 2; i++) {
        /* TEST_RUNNER: what runs this program (tests/test_arm.sh: qemu-aarch64) */
        snprintf(cmd, sizeof cmd, "%s %s '%s' --print-wait-policy", env[i],
                 getenv("TEST_RUNNER") ? getenv("TEST_RUNNER") : "", self);
        out[0] = 0;
        p = popen(cmd, "r");
        if (p) {
            if (!fgets(out, sizeof out, p)) out[0] = 0;
            pclose(p);
        }
        out[strcspn(out, "\n")] = 0;
        CHECK(strcmp(out, want[i]) == 0, "%s: OMP_WAIT_POLICY in the program is '%s', want '%s'\n", env[i], out, want[i]);
    }
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "--print-wait-policy") == 0) {
        const char *v;
        trn_omp_wait_passive(argv);
        v = getenv("OMP_WAIT_POLICY");
        printf("%s\n", v ? v : "(unset)");
        return 0;
    }
    test_misuse();
    test_ledger_still();
    test_mkdirs();
    test_wait_policy(argv[0]);
    return check_summary();
}
