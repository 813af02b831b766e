// build: -pthread -O1 -g1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined
/* tests/test_ddp_nccl.cpp - train_nccl.h's NCCL communicator and the CUDA
   backend, in real processes on a CPU machine: tests/cuda_on_cpu.h runs
   the kernels, tests/nccl_on_cpu.h stands in for NCCL (its documented
   semantics, checked: equal blocks, in-place rules, NaN in the blocks a
   reduce-scatter does not give a rank, non-blocking init, async errors).
   So the code a GPU job runs (device selection by local rank, the unique
   id through the TCP rendezvous, events between the compute and the
   communication stream, the reduce-scatter/all-gather split into equal
   blocks plus a tail, async error polling and abort) runs here too.
   Checked, with ranks started like a launcher (fork + exec of this file):
     - DDP, 2 ranks, small buckets during backward: every rank holds the
       same bits, equal within TOL to one process on the combined batch;
     - ZeRO-1, 3 ranks, a parameter count that leaves a tail after 3 equal
       blocks: equal within TOL to the same reference, and the optimizer
       state per rank is one shard;
     - ZeRO-2, 3 ranks, buckets of 96 bytes reduced to their owners during
       backward (ncclReduce per owner in a group): the same reference;
     - FSDP, 3 ranks: the weights gathered from the owners' shards
       (ncclBroadcast per owner in a group): the same reference; and on a
       model with two blocks (trn_unit), gathered into device memory per
       block: its own one-process reference;
     - a rank killed with SIGKILL: the others report TRN_ERR_COMM from
       NCCL's async error and exit, no hang;
     - a rank that never answers (it sleeps before the step's loss
       all-reduce): the others end with TRN_ERR_TIMEOUT after
       TRN_DDP_TIMEOUT, from the event poll, each naming its rank. The
       shim's copy into pageable memory blocks like CUDA's, so the old
       code (result copied to pageable memory) would hang there instead;
     - a rank that dies in the middle of a collective (NCCL_ON_CPU_DIE_AT):
       the others end with the async error, naming their rank;
     - a rank that sees one GPU uses device 0 whatever its local rank;
       the communication stream has the highest priority (-5 here). */
#define TRN_CUDA_FLASH_HS(X) /* no bf16 attention here: its kernels are not compiled (train_cuda.h) */
#define TRAIN_IMPLEMENTATION
#include "train.h"
#include "tests/cuda_on_cpu.h"
#define TRAIN_CUDA_IMPLEMENTATION
#include "train_cuda.h"
#include "tests/nccl_on_cpu.h" /* NCCL's API, then train_nccl.h's implementation */
#include "tests/check.h"

#include <signal.h>
#include <sys/wait.h>
#include <string>
#include <vector>

#define TOL 2e-5
#define STEPS 5
#define ROWS 4
#define NIN 8
#define NHID 16
#define NOUT 4

typedef struct net {
    trn_model m;
    trn_tensor *w1, *b1, *lw, *lb, *w2, *b2, *w3, *b3, *odd;
    trn_tensor *hw[2], *hb[2]; // g_blocks: two residual blocks (FSDP gathers them on the "GPU")
} net;
static int g_blocks;

// 13+128+16+16+16+256+16+64+4 = 529 floats: with 3 ranks, 3 equal blocks
// of 176 (shard sizes are multiples of 16 floats) and a tail of 1 (b3's
// last bias) that the last rank also owns
static void net_build(net *n, const trn_backend *be, uint64_t seed) {
    trn_rng rng;
    trn_rng_seed(&rng, seed);
    trn_model_init(&n->m, be);
    n->odd = trn_param1(&n->m, "odd", 13); // not used by any op
    n->w1 = trn_param2(&n->m, "w1", NHID, NIN);
    n->b1 = trn_param1(&n->m, "b1", NHID);
    n->lw = trn_param1(&n->m, "ln.w", NHID);
    n->lb = trn_param1(&n->m, "ln.b", NHID);
    n->w2 = trn_param2(&n->m, "w2", NHID, NHID);
    n->b2 = trn_param1(&n->m, "b2", NHID);
    n->w3 = trn_param2(&n->m, "w3", NOUT, NHID);
    n->b3 = trn_param1(&n->m, "b3", NOUT); // last: the tail is b3's last float
    for (int l = 0; g_blocks && l < 2; l++) {
        char name[32];
        snprintf(name, sizeof name, "h.%d.w", l);
        n->hw[l] = trn_param2(&n->m, name, NHID, NHID);
        snprintf(name, sizeof name, "h.%d.b", l);
        n->hb[l] = trn_param1(&n->m, name, NHID);
    }
    if (trn_model_alloc(&n->m) != TRN_OK) trn_fatal("net_build: %s", trn_error_reason());
    trn_init_normal(&n->m, n->w1, 0.0f, 0.4f, &rng);
    trn_init_normal(&n->m, n->b1, 0.0f, 0.1f, &rng);
    trn_init_const(&n->m, n->lw, 1.0f);
    trn_init_const(&n->m, n->lb, 0.0f);
    trn_init_normal(&n->m, n->w2, 0.0f, 0.3f, &rng);
    trn_init_normal(&n->m, n->b2, 0.0f, 0.1f, &rng);
    trn_init_normal(&n->m, n->w3, 0.0f, 0.3f, &rng);
    trn_init_normal(&n->m, n->b3, 0.0f, 0.1f, &rng);
    trn_init_normal(&n->m, n->odd, 0.0f, 1.0f, &rng);
    for (int l = 0; g_blocks && l < 2; l++) {
        trn_init_normal(&n->m, n->hw[l], 0.0f, 0.3f, &rng);
        trn_init_normal(&n->m, n->hb[l], 0.0f, 0.1f, &rng);
    }
}

static trn_tensor *net_forward(net *n, const float *x, const int *y, int rows) {
    trn_model *m = &n->m;
    int shape[2] = {rows, NIN};
    trn_tensor *h = trn_input(m, "x", 2, shape, x);
    h = trn_layernorm(m, trn_linear(m, h, n->w1, n->b1), n->lw, n->lb);
    h = trn_gelu(m, trn_linear(m, h, n->w2, n->b2));
    h = trn_relu(m, trn_linear(m, h, n->w2, n->b2)); // w2 and b2 used twice
    for (int l = 0; g_blocks && l < 2; l++) {
        trn_unit(m, n->hw[l]);
        h = trn_add(m, h, trn_gelu(m, trn_linear(m, h, n->hw[l], n->hb[l])));
    }
    trn_unit(m, NULL);
    return trn_cross_entropy(m, trn_linear(m, h, n->w3, n->b3), y, NOUT);
}

static void batch(long long k, int rows, float *x, int *y) {
    for (int i = 0; i < rows; i++) {
        trn_rng r;
        trn_rng_seed(&r, (uint64_t)(k * rows + i) * 7919u + 3u);
        for (int c = 0; c < NIN; c++) x[i * NIN + c] = trn_rng_normal(&r);
        y[i] = (x[i * NIN] > 0.0f) * 2 + (x[i * NIN + 1] > 0.0f);
    }
}

static void harness_setup(void) {
    cuemu::config().device_count = 4; // one "GPU" per local rank
    trn_set_threads(1);
}

// ---------------------------------------------------------------------------
// worker: one rank
// ---------------------------------------------------------------------------
// kill_rank: SIGKILL at step 2; hang_rank: sleeps at step 2 before the
// loss all-reduce; timeout 0: TRN_DDP_TIMEOUT's
static int worker(const char *dir, const char *tag, int zero1, long long bucket, int kill_rank, int hang_rank = -1,
                  double timeout = 20, int gpus = 4, trn_shard_mode shard = TRN_SHARD_NONE) {
    trn_ddp ddp;
    trn_ddp_desc dd;
    memset(&dd, 0, sizeof dd);
    dd.zero1 = zero1;
    dd.shard = shard;
    dd.bucket_bytes = (size_t)bucket;
    dd.timeout_s = timeout;
    harness_setup();
    cuemu::config().device_count = gpus;
    trn_result rc = trn_ddp_init(&ddp, &dd); // trn_cuda_init(local rank), rendezvous, "NCCL"
    if (rc != TRN_OK) { fprintf(stderr, "init: %s: %s\n", trn_result_string(rc), trn_error_reason()); return 1; }
    if (strcmp(ddp.comm.name, "nccl") != 0) { fprintf(stderr, "communicator %s, not nccl\n", ddp.comm.name); return 1; }
    trn_cuda_set_tf32(0);
    net n;
    net_build(&n, trn_cuda_backend(), 500u + (uint64_t)ddp.rank);
#define W_TRY(what, call) do { rc = (call); if (rc != TRN_OK) { \
        fprintf(stderr, "rank %d: %s: %s: %s\n", ddp.rank, what, trn_result_string(rc), trn_error_reason()); \
        trn_ddp_abort(&ddp); return 1; } } while (0)
    W_TRY("attach", trn_ddp_attach(&ddp, &n.m));
    trn_adamw opt;
    trn_adamw_init(&opt, NULL);
    float x[ROWS * NIN];
    int y[ROWS];
    int steps = kill_rank >= 0 || hang_rank >= 0 || getenv("NCCL_ON_CPU_DIE_AT") ? 1000 : STEPS;
    for (int step = 0; step < steps; step++) {
        if (step == 2 && ddp.rank == kill_rank) raise(SIGKILL);
        batch(trn_ddp_batch_index(&ddp, step), ROWS, x, y);
        trn_zero_grad(&n.m);
        trn_reset(&n.m);
        trn_tensor *loss = net_forward(&n, x, y, ROWS);
        trn_backward(&n.m, loss);
        W_TRY("allreduce", trn_ddp_allreduce_grads(&ddp, &n.m));
        float norm;
        W_TRY("clip", trn_ddp_clip_grad_norm(&ddp, &n.m, 1.0f, &norm));
        W_TRY("adamw", trn_ddp_adamw_step(&ddp, &opt, &n.m, 0.02f));
        if (step == 2 && ddp.rank == hang_rank) { // never answers; gone long after the others' timeout
            trn__dist_sleep_ms(8000);
            _exit(3);
        }
        double mean = trn_item(&n.m, loss); // the mean loss over the ranks, in host memory
        W_TRY("loss all-reduce", trn_ddp_allreduce_host(&ddp, &mean, 1, 1));
    }
    W_TRY("unshard", trn_ddp_unshard(&ddp, &n.m)); // FSDP: the whole weights again
    std::vector<float> w(n.m.n_floats);
    n.m.backend->download(w.data(), n.m.param_data, sizeof(float) * n.m.n_floats);
    char path[512];
    snprintf(path, sizeof path, "%s/%s.w%d", dir, tag, ddp.rank);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(w.data(), sizeof(float), w.size(), f) != w.size()) return 1;
    fclose(f);
    snprintf(path, sizeof path, "%s/%s.s%d", dir, tag, ddp.rank);
    f = fopen(path, "w");
    if (!f) return 1;
    fprintf(f, "%zu %zu %zu %d\n", trn_ledger_current(TRN_DEVICE, TRN_KIND_OPTIM), ddp.shard_hi - ddp.shard_lo,
            trn_ledger_current(TRN_DEVICE, TRN_KIND_COMM), nccl_on_cpu_stream_priority);
    fclose(f);
    W_TRY("barrier", trn_ddp_barrier(&ddp));
    trn_ddp_free(&ddp);
    trn_adamw_free(&opt);
    trn_model_free(&n.m);
    return cuemu::errors() ? 1 : 0;
}

// ---------------------------------------------------------------------------
// parent
// ---------------------------------------------------------------------------
static char g_self[1024], g_dir[256];

static int run(const char *tag, int world, const char *mode, int *codes, double *secs) {
    int port = 0, fd = trn__net_listen(0, &port);
    pid_t pid[4];
    double t0 = trn__dist_now();
    close(fd);
    for (int r = 0; r < world; r++) {
        pid[r] = fork();
        if (pid[r] == 0) {
            char s[3][32], log[512];
            snprintf(s[0], 32, "%d", r); snprintf(s[1], 32, "%d", world); snprintf(s[2], 32, "%d", port);
            setenv("RANK", s[0], 1); setenv("LOCAL_RANK", s[0], 1); setenv("WORLD_SIZE", s[1], 1);
            setenv("MASTER_ADDR", "127.0.0.1", 1); setenv("MASTER_PORT", s[2], 1);
            unsetenv("TORCHELASTIC_USE_AGENT_STORE");
            snprintf(log, sizeof log, "%s/%s.log%d", g_dir, tag, r);
            int lf = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
            if (lf >= 0) { dup2(lf, 1); dup2(lf, 2); close(lf); }
            execl(g_self, g_self, "--worker", g_dir, tag, mode, (char *)NULL);
            _exit(127);
        }
    }
    int all_ok = 1;
    for (int r = 0; r < world; r++) { // at most 60 s for everyone, then SIGKILL
        int st = -1;
        while (waitpid(pid[r], &st, WNOHANG) == 0) {
            if (trn__dist_now() - t0 > 60) { kill(pid[r], SIGKILL); waitpid(pid[r], &st, 0); st = -1; break; }
            trn__dist_sleep_ms(5);
        }
        codes[r] = st == -1 ? -1 : WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        all_ok &= codes[r] == 0;
    }
    *secs = trn__dist_now() - t0;
    return all_ok;
}

static std::vector<float> read_w(const char *tag, int r, size_t n) {
    std::vector<float> w(n);
    char path[512];
    snprintf(path, sizeof path, "%s/%s.w%d", g_dir, tag, r);
    FILE *f = fopen(path, "rb");
    if (!f || fread(w.data(), sizeof(float), n, f) != n) w.clear();
    if (f) fclose(f);
    return w;
}

static std::string read_log(const char *tag, int r) {
    char path[512], buf[4096];
    snprintf(path, sizeof path, "%s/%s.log%d", g_dir, tag, r);
    FILE *f = fopen(path, "r");
    size_t k = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f) fclose(f);
    buf[k] = 0;
    return buf;
}

static std::vector<float> reference(int world) {
    net n;
    trn_adamw opt;
    std::vector<float> x((size_t)world * ROWS * NIN);
    std::vector<int> y((size_t)world * ROWS);
    if (trn_cuda_init(0) != TRN_OK) { printf("FAIL cuda init: %s\n", trn_error_reason()); exit(1); }
    net_build(&n, trn_cuda_backend(), 500u);
    trn_adamw_init(&opt, NULL);
    for (int step = 0; step < STEPS; step++) {
        batch(step, world * ROWS, x.data(), y.data());
        trn_zero_grad(&n.m);
        trn_reset(&n.m);
        trn_backward(&n.m, net_forward(&n, x.data(), y.data(), world * ROWS));
        trn_clip_grad_norm(&n.m, 1.0f);
        trn_adamw_step(&opt, &n.m, 0.02f);
    }
    std::vector<float> w(n.m.n_floats);
    n.m.backend->download(w.data(), n.m.param_data, sizeof(float) * w.size());
    trn_adamw_free(&opt);
    trn_model_free(&n.m);
    return w;
}

static double max_diff(const std::vector<float> &a, const std::vector<float> &b) {
    double d = 0;
    for (size_t i = 0; i < a.size() && i < b.size(); i++) d = fmax(d, fabs((double)a[i] - b[i]));
    return a.size() == b.size() && !a.empty() ? d : 1e30;
}

static void check_run(const char *tag, int world, const char *mode, size_t n, const std::vector<float> &ref) {
    int codes[4];
    double secs;
    int ok = run(tag, world, mode, codes, &secs);
    CHECK(ok, "%s: all ranks exit 0\n", tag);
    if (!ok) {
        for (int r = 0; r < world; r++) printf("  %s rank %d (exit %d): %s\n", tag, r, codes[r], read_log(tag, r).c_str());
        return;
    }
    std::vector<float> w0 = read_w(tag, 0, n);
    int same = !w0.empty();
    for (int r = 1; r < world; r++) same &= read_w(tag, r, n) == w0;
    CHECK(same, "%s: all ranks hold the same bits\n", tag);
    double d = max_diff(w0, ref);
    printf("  %s (%d ranks): max |w - one process| = %.3g (%.1f s)\n", tag, world, d, secs);
    CHECK(d <= TOL, "%s: = one process on the combined batch (%.3g <= %.3g)\n", tag, d, TOL);
}

int main(int argc, char **argv) {
    if (argc == 5 && !strcmp(argv[1], "--worker")) {
        const char *mode = argv[4];
        if (!strcmp(mode, "ddp")) return worker(argv[2], argv[3], 0, 96, -1);
        if (!strcmp(mode, "zero1")) return worker(argv[2], argv[3], 1, 0, -1);
        if (!strcmp(mode, "kill")) return worker(argv[2], argv[3], 0, 0, 1);
        if (!strcmp(mode, "hang")) return worker(argv[2], argv[3], 0, 96, -1, 1, 0); // TRN_DDP_TIMEOUT
        if (!strcmp(mode, "die")) return worker(argv[2], argv[3], 1, 96, -1, -1, 0);
        if (!strcmp(mode, "onegpu")) return worker(argv[2], argv[3], 0, 96, -1, -1, 20, 1);
        if (!strcmp(mode, "zero2")) return worker(argv[2], argv[3], 0, 96, -1, -1, 20, 4, TRN_SHARD_ZERO2);
        if (!strcmp(mode, "fsdp")) return worker(argv[2], argv[3], 0, 96, -1, -1, 20, 4, TRN_SHARD_FSDP);
        if (!strcmp(mode, "fsdpblocks")) { g_blocks = 1; return worker(argv[2], argv[3], 0, 96, -1, -1, 20, 4, TRN_SHARD_FSDP); }
        return 2;
    }
    ssize_t k = readlink("/proc/self/exe", g_self, sizeof g_self - 1);
    if (k <= 0) return 1;
    g_self[k] = 0;
    snprintf(g_dir, sizeof g_dir, "/tmp/test_ddp_nccl.XXXXXX");
    if (!mkdtemp(g_dir)) return 1;
    harness_setup();
    trn_cuda_set_tf32(0);
    std::vector<float> ref2 = reference(2), ref3 = reference(3);
    size_t n = ref2.size();
    CHECK(n == 529, "model size %zu\n", n);

    check_run("ddp2", 2, "ddp", n, ref2);
    check_run("zero3", 3, "zero1", n, ref3);
    {   // ZeRO-1: the optimizer state of one shard; ranks 0,1: 176 floats, rank 2: 177
        char path[512];
        size_t optim = 0, shard = 0, comm = 0;
        int prio = 0;
        for (int r = 0; r < 3; r++) {
            snprintf(path, sizeof path, "%s/zero3.s%d", g_dir, r);
            FILE *f = fopen(path, "r");
            int got = f ? fscanf(f, "%zu %zu %zu %d", &optim, &shard, &comm, &prio) : 0;
            if (f) fclose(f);
            CHECK(got == 4 && shard == (r < 2 ? 176u : 177u) && optim == 2 * 4 * shard,
                  "ZeRO-1 rank %d: shard %zu floats, optimizer %zu bytes on the device\n", r, shard, optim);
            CHECK(comm == 64, "COMM on the device: the 64-byte scratch only (%zu)\n", comm);
            CHECK(prio == -5, "rank %d: the communication stream has the highest priority (%d)\n", r, prio);
        }
    }
    {   // rank 1 dies: ranks 0 and 2 hear it from "NCCL" and stop
        int codes[4];
        double secs;
        run("kill", 3, "kill", codes, &secs);
        CHECK(codes[1] == 128 + SIGKILL, "rank 1 was killed (%d)\n", codes[1]);
        for (int r = 0; r < 3; r += 2) {
            std::string log = read_log("kill", r);
            CHECK(codes[r] == 1 && log.find("TRN_ERR_COMM") != std::string::npos &&
                  log.find("nccl: ") != std::string::npos && log.find("remote process exited") != std::string::npos,
                  "rank %d exits 1 with the async error: %s\n", r, log.c_str());
            printf("  killed rank 1 -> rank %d: %s", r, log.c_str());
        }
        CHECK(secs < 15, "no hang (%.1f s, timeout 20 s)\n", secs);
    }
    // ZeRO-2: buckets reduced to their owners during backward (ncclReduce in a group)
    check_run("zero2", 3, "zero2", n, ref3);
    // FSDP (this model has no blocks: one root unit, gathered after each step
    // by a group of ncclBroadcast from the owners)
    check_run("fsdp", 3, "fsdp", n, ref3);
    {   // FSDP with two blocks: each gathered into device memory before its
        // forward and backward, freed after, the next prefetched
        g_blocks = 1;
        std::vector<float> ref3b = reference(3);
        g_blocks = 0;
        check_run("fsdpblocks", 3, "fsdpblocks", ref3b.size(), ref3b);
    }
    // one visible GPU per rank (Slurm --gpus-per-task=1): local rank 1 uses device 0
    check_run("onegpu", 2, "onegpu", n, ref2);
    {   // rank 1 never answers: ranks 0 and 2 give up after TRN_DDP_TIMEOUT (2 s),
        // from the event poll (not the ring's own 120 s), naming themselves
        int codes[4];
        double secs;
        setenv("TRN_DDP_TIMEOUT", "2", 1);
        run("hang", 3, "hang", codes, &secs);
        unsetenv("TRN_DDP_TIMEOUT");
        CHECK(codes[1] == 3, "rank 1 slept through it and left (%d)\n", codes[1]);
        int timed_out = 0;
        for (int r = 0; r < 3; r += 2) {
            std::string log = read_log("hang", r);
            char me[32];
            snprintf(me, sizeof me, "rank %d: nccl: ", r);
            CHECK(codes[r] == 1 && log.find(me) != std::string::npos, "rank %d exits 1 naming itself: %s\n", r, log.c_str());
            timed_out += log.find("TRN_ERR_TIMEOUT") != std::string::npos &&
                         log.find("not done after 2.0 s") != std::string::npos;
            printf("  rank 1 hangs -> rank %d: %s", r, log.c_str());
        }
        CHECK(timed_out >= 1, "the hang ends by the TRN_DDP_TIMEOUT poll (%d rank(s) timed out, the other may hear the abort)\n",
              timed_out);
    }
    {   // rank 1 dies inside its 9th collective (a step-2 bucket, ZeRO-1's reduce-scatter
        // or its all-gather): the others hear it from "NCCL", naming themselves
        int codes[4];
        double secs;
        setenv("NCCL_ON_CPU_DIE_AT", "1:9", 1);
        run("die", 3, "die", codes, &secs);
        unsetenv("NCCL_ON_CPU_DIE_AT");
        CHECK(codes[1] == 128 + SIGKILL, "rank 1 died mid-collective (%d)\n", codes[1]);
        for (int r = 0; r < 3; r += 2) {
            std::string log = read_log("die", r);
            char me[32];
            snprintf(me, sizeof me, "rank %d: nccl: ", r);
            CHECK(codes[r] == 1 && log.find(me) != std::string::npos &&
                  (log.find("TRN_ERR_COMM") != std::string::npos || log.find("TRN_ERR_TIMEOUT") != std::string::npos),
                  "rank %d exits 1 naming itself: %s\n", r, log.c_str());
            printf("  rank 1 dies mid-collective -> rank %d: %s", r, log.c_str());
        }
    }
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) printf("could not remove %s\n", g_dir);
    return check_summary();
}
