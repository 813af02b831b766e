// ddp_mlp - data-parallel training in one page. The same program runs as W
// processes (ranks). Each takes its own batches, runs forward and backward,
// and then the gradients are averaged over the ranks (train_nccl.h), so
// every rank takes the same AdamW step and they all end with the same
// weights: those of one process trained on all W batches at once.
//
// The task: 16-number inputs, labelled by a fixed random "teacher" (the
// largest of 8 linear scores); a 3-layer MLP learns to imitate it.
//
// Run it on one machine (CPU processes talk over TCP on loopback):
//   examples/ddp_mlp                                      one process
//   mpirun -np 2 examples/ddp_mlp                         Open MPI starts 2 ranks
//   torchrun --nproc_per_node=2 --no-python examples/ddp_mlp
//   for r in 0 1; do RANK=$r WORLD_SIZE=2 examples/ddp_mlp & done; wait
// With --ckpt DIR it saves every --save-every steps and, started again,
// resumes from DIR (only with the same number of ranks: it says so).
//
// On GPUs, examples/ddp_mlp_cuda.cu is this file with TRN_USE_CUDA defined:
// the model lives on the GPU of each rank's local rank and NCCL averages:
//   torchrun --nproc_per_node=8 --no-python examples/ddp_mlp_cuda
//   srun -N 2 --ntasks-per-node=8 --gpus-per-node=8 examples/ddp_mlp_cuda
//
// The last line of every rank, "rank R/W weights crc32c XXXXXXXX", is the
// same on all ranks (tests/test_ddp.sh checks it).
//
// build: -pthread
#define TRAIN_IMPLEMENTATION
#include "train.h"
#include "extras/train_loop.h" // progress/ETA
#ifdef TRN_USE_CUDA
#define TRAIN_CUDA_IMPLEMENTATION
#include "train_cuda.h"
#else
#define TRAIN_NCCL_CPU_ONLY   // the TCP communicator: no CUDA, no NCCL
#endif
#define TRAIN_NCCL_IMPLEMENTATION
#include "train_nccl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define NIN 16
#define NOUT 8

static trn_ddp ddp; // global, so that TRY can abort it

// a kit call that can fail: print rank, where and why; abort the
// communicator so the other ranks stop now rather than at their timeout
#define TRY(call)                                                                            \
    do {                                                                                     \
        trn_result try_rc_ = (call);                                                         \
        if (try_rc_ != TRN_OK) {                                                             \
            fprintf(stderr, "ddp_mlp: rank %d: %s:%d: %s: %s\n", ddp.rank, __FILE__, __LINE__, \
                    trn_result_string(try_rc_), trn_error_reason());                         \
            trn_ddp_abort(&ddp);                                                             \
            exit(1);                                                                         \
        }                                                                                    \
    } while (0)

// ===========================================================================
// >>data: an endless data set; sample i is the same on every rank
// ===========================================================================
static float teacher[NOUT][NIN];

static void make_teacher(void) {
    trn_rng r;
    trn_rng_seed(&r, 42);
    for (int o = 0; o < NOUT; o++)
        for (int i = 0; i < NIN; i++) teacher[o][i] = trn_rng_normal(&r);
}

// batch k of B rows: samples k*B .. k*B+B-1. Rank r of W takes batches
// r, r+W, r+2W, ... (trn_ddp_batch_index), so the ranks never overlap and
// together see what one process with batch W*B would see.
static void make_batch(long long k, int B, float *x, int *y) {
    for (int b = 0; b < B; b++) {
        trn_rng r;
        trn_rng_seed(&r, (uint64_t)(k * B + b) * 2654435761u + 1);
        float *xi = x + (size_t)b * NIN, best = -1e30f;
        for (int i = 0; i < NIN; i++) xi[i] = trn_rng_normal(&r);
        for (int o = 0; o < NOUT; o++) {
            float s = 0;
            for (int i = 0; i < NIN; i++) s += teacher[o][i] * xi[i];
            if (s > best) { best = s; y[b] = o; }
        }
    }
}

// ===========================================================================
// >>model: (B,16) -> linear -> gelu -> linear -> gelu -> linear -> (B,8)
// ===========================================================================
typedef struct mlp {
    trn_model m;
    trn_tensor *w1, *b1, *w2, *b2, *w3, *b3;
} mlp;

static void mlp_build(mlp *n, const trn_backend *backend, int H, uint64_t seed) {
    trn_rng r;
    TRY(trn_model_init(&n->m, backend));
    n->w1 = trn_param2(&n->m, "w1", H, NIN);
    n->b1 = trn_param1(&n->m, "b1", H);
    n->w2 = trn_param2(&n->m, "w2", H, H);
    n->b2 = trn_param1(&n->m, "b2", H);
    n->w3 = trn_param2(&n->m, "w3", NOUT, H);
    n->b3 = trn_param1(&n->m, "b3", NOUT);
    TRY(trn_model_alloc(&n->m));
    trn_rng_seed(&r, seed);
    trn_init_normal(&n->m, n->w1, 0.0f, 1.0f / sqrtf((float)NIN), &r);
    trn_init_normal(&n->m, n->w2, 0.0f, 1.0f / sqrtf((float)H), &r);
    trn_init_normal(&n->m, n->w3, 0.0f, 1.0f / sqrtf((float)H), &r);
    // biases stay 0 (trn_model_alloc zeroes the buffer)
}

static trn_tensor *mlp_forward(mlp *n, const float *x, const int *y, int B) {
    int shape[2] = {B, NIN};
    trn_tensor *h = trn_input(&n->m, "x", 2, shape, x);
    h = trn_gelu(&n->m, trn_linear(&n->m, h, n->w1, n->b1));
    h = trn_gelu(&n->m, trn_linear(&n->m, h, n->w2, n->b2));
    return trn_cross_entropy(&n->m, trn_linear(&n->m, h, n->w3, n->b3), y, NOUT);
}

// ===========================================================================
// >>main
// ===========================================================================
static void usage(FILE *f) {
    fprintf(f,
            "usage: ddp_mlp [options]   (start it with torchrun, mpirun, srun, or RANK/WORLD_SIZE)\n"
            "  --steps N        training steps (default 200)\n"
            "  --batch B        rows per rank per step (default 32)\n"
            "  --hidden H       hidden width (default 256)\n"
            "  --lr X           AdamW learning rate (default 3e-3)\n"
            "  --zero1          shard AdamW's state over the ranks (ZeRO-1)\n"
            "  --bucket-kb K    all-reduce bucket size in KiB (default 25600 = 25 MiB)\n"
            "  --no-overlap     all-reduce after backward instead of during it\n"
            "  --timeout S      seconds a rank waits for the others (default 600)\n"
            "  --ckpt DIR       save DIR/ckpt.safetensors, resume from it when present\n"
            "  --save-every N   steps between checkpoints (default 50)\n"
            "  --log-every N    steps between log lines (default 10)\n");
}

int main(int argc, char **argv) {
    trn_omp_wait_passive(argv); // OpenMP threads sleep when idle (unless OMP_WAIT_POLICY is set)
    int steps = 200, B = 32, H = 256, save_every = 50, log_every = 10, start = 0;
    float lr = 3e-3f;
    const char *ckpt_dir = NULL;
    trn_ddp_desc dd;
    memset(&dd, 0, sizeof dd);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 0; }
        else if (!strcmp(a, "--zero1")) dd.shard = TRN_SHARD_ZERO1;
        else if (!strcmp(a, "--no-overlap")) dd.no_overlap = 1;
        else if (v && !strcmp(a, "--steps")) { steps = atoi(v); i++; }
        else if (v && !strcmp(a, "--batch")) { B = atoi(v); i++; }
        else if (v && !strcmp(a, "--hidden")) { H = atoi(v); i++; }
        else if (v && !strcmp(a, "--lr")) { lr = (float)atof(v); i++; }
        else if (v && !strcmp(a, "--bucket-kb")) { dd.bucket_bytes = (size_t)atoll(v) << 10; i++; }
        else if (v && !strcmp(a, "--timeout")) { dd.timeout_s = atof(v); i++; }
        else if (v && !strcmp(a, "--ckpt")) { ckpt_dir = v; i++; }
        else if (v && !strcmp(a, "--save-every")) { save_every = atoi(v); i++; }
        else if (v && !strcmp(a, "--log-every")) { log_every = atoi(v); i++; }
        else { fprintf(stderr, "ddp_mlp: unknown or incomplete option '%s' (see --help)\n", a); return 2; }
    }
    if (steps < 0 || B < 1 || H < 1 || save_every < 1 || log_every < 1 || !(lr > 0)) {
        fprintf(stderr, "ddp_mlp: --steps >= 0, --batch, --hidden, --save-every, --log-every >= 1, --lr > 0\n");
        return 2;
    }

    // 1. who am I: the launcher's variables, the rendezvous, the GPU
    TRY(trn_ddp_init(&ddp, &dd));
    trn_ddp_log(&ddp, "ddp_mlp: %d rank(s) started by %s, communicator %s, %s, batch %d x %d ranks = %d\n",
                ddp.world, ddp.env.launcher, ddp.comm.name, dd.shard == TRN_SHARD_ZERO1 ? "ZeRO-1" : "DDP", B, ddp.world, B * ddp.world);

    // 2. the model: each rank seeds differently on purpose; attach makes
    //    them all start from rank 0's weights
    make_teacher();
    const trn_backend *backend = NULL;
#ifdef TRN_USE_CUDA
    TRY(trn_cuda_init(ddp.local_rank)); // the GPU trn_ddp_init chose (a no-op if it did)
    backend = trn_cuda_backend();
#endif
    mlp net;
    mlp_build(&net, backend, H, 1000u + (uint64_t)ddp.rank);
    TRY(trn_ddp_attach(&ddp, &net.m));
    trn_ddp_log(&ddp, "ddp_mlp: %zu parameters in %d all-reduce bucket(s)\n", net.m.n_floats, ddp.n_buckets);
    trn_adamw opt;
    trn_adamw_desc ad;
    memset(&ad, 0, sizeof ad);
    ad.lr = lr;
    ad.weight_decay = 0.01f; // AdamW's usual default (a 0 here would mean none)
    trn_adamw_init(&opt, &ad);

    // 3. resume: every rank checks the world size, then loads its state
    char ckpt[1024] = "";
    if (ckpt_dir) {
        snprintf(ckpt, sizeof ckpt, "%s/ckpt.safetensors", ckpt_dir);
        if (trn_ddp_is_main(&ddp)) TRY(trn_mkdirs(ckpt_dir));
        if (access(ckpt, F_OK) == 0) {
            TRY(trn_ddp_checkpoint_load(&ddp, ckpt, &net.m, &opt, NULL));
            start = (int)opt.step;
            trn_ddp_log(&ddp, "ddp_mlp: resumed from %s at step %d\n", ckpt, start);
        }
    }

    // 4. train
    float *x = (float *)malloc(sizeof(float) * (size_t)B * NIN);
    int *y = (int *)malloc(sizeof(int) * (size_t)B);
    if (!x || !y) { fprintf(stderr, "ddp_mlp: out of memory\n"); return 1; }
    trn_progress prog; // for the time left on each logged line
    trn_progress_init(&prog, start, steps);
    for (int step = start; step < steps; step++) {
        make_batch(trn_ddp_batch_index(&ddp, step), B, x, y);
        trn_zero_grad(&net.m);
        trn_reset(&net.m);
        trn_tensor *loss = mlp_forward(&net, x, y, B);
        trn_backward(&net.m, loss);                        // buckets leave as they complete
        TRY(trn_ddp_allreduce_grads(&ddp, &net.m));        // now: the average over ranks
        float norm;
        TRY(trn_ddp_clip_grad_norm(&ddp, &net.m, 1.0f, &norm));
        TRY(trn_ddp_adamw_step(&ddp, &opt, &net.m, lr));   // same step on every rank
        if (step % log_every == 0 || step == steps - 1) {
            double l = trn_item(&net.m, loss);             // this rank's loss
            TRY(trn_ddp_allreduce_host(&ddp, &l, 1, 1));   // the mean over ranks
            char eta[32];
            trn_duration_str(trn_progress_eta(&prog, step + 1), eta, sizeof eta);
            trn_ddp_log(&ddp, "step %4d  loss %.4f  grad norm %.3f  eta %s\n", step, l, norm, eta);
        }
        if (ckpt_dir && ((step + 1) % save_every == 0 || step == steps - 1))
            TRY(trn_ddp_checkpoint_save(&ddp, ckpt, &net.m, &opt, NULL));
    }

    // 5. every rank holds the same weights: show it
    float *w = (float *)malloc(sizeof(float) * net.m.n_floats);
    if (!w) { fprintf(stderr, "ddp_mlp: out of memory\n"); return 1; }
    trn_read_params(&net.m, 0, w, net.m.n_floats);
    printf("rank %d/%d weights crc32c %08x\n", ddp.rank, ddp.world,
           (unsigned)trn_crc32c(0, w, sizeof(float) * net.m.n_floats));
    fflush(stdout);
    TRY(trn_ddp_barrier(&ddp)); // nobody leaves while others still need it
    trn_ddp_free(&ddp);
    trn_adamw_free(&opt);
    trn_model_free(&net.m);
    free(w); free(x); free(y);
    return 0;
}
