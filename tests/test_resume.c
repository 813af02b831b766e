/* tests/test_resume.c - a small trainer that checkpoints and resumes, and
   the proof that a resumed run equals an uninterrupted one bit for bit.

   The trainer is an MLP classifier (16 -> 64 gelu -> 64 relu -> 8) on a
   synthetic data set, with everything that makes resuming hard: AdamW
   moments, a warmup + cosine learning-rate schedule, gradient clipping, a
   data loader that reshuffles every epoch from its own RNG, and input
   noise from a second RNG. A checkpoint holds the weights, the moments,
   and in its metadata the step, both RNG states and the loader position.

   Without arguments it tests itself in-process: a run stopped after
   step 13 and after step 22 (and one whose newest checkpoint is then
   corrupted) resumes to the same final weights and losses as a run never
   stopped. tests/test_kill_resume.sh runs it as a program and kill -9s it:

     test_resume --dir DIR [--steps 40] [--every 3] [--keep 2] [--threads 1]
                 [--step-ms 0]    (sleep inside each step: room for a kill)
                 [--async 1]      (trn_checkpoint_save_async: written by a thread)
         train, resuming from DIR's newest valid checkpoint if there is one;
         print "step S loss L" (L in hex, exact) per step; at the end write
         DIR/final.safetensors and print "final <crc32c of the weights>"
     test_resume --verify-all DIR
         every DIR/ckpt_*.safetensors must verify (exit 1 otherwise)
*/
#define TRAIN_IMPLEMENTATION
#include "train.h"
#include "extras/train_run.h"
#include "tests/check.h"

#include <dirent.h>
#include <time.h>

enum { D = 16, H = 64, C = 8, NS = 256, B = 16 };

typedef struct run_cfg {
    const char *dir;
    int steps, every, keep, step_ms, async;
    int stop_after;   /* in-process test: return after this many steps (0: no) */
    int quiet;
} run_cfg;

typedef struct loader {   /* epochs of a shuffled permutation of the samples */
    int perm[NS];
    int pos, epoch;
    trn_rng rng;          /* shuffles */
    uint64_t rng_at_epoch; /* its state before this epoch's shuffle: saved, so
                              a resume rebuilds the same permutation */
} loader;

static float data_x[NS][D];
static int data_y[NS];

/* the data set: x ~ N(0,1), label = argmax of a fixed random teacher */
static void make_data(void) {
    trn_rng r;
    float teacher[C][D];
    int i, j, k;
    trn_rng_seed(&r, 1234);
    for (i = 0; i < C; i++) for (j = 0; j < D; j++) teacher[i][j] = trn_rng_normal(&r);
    for (i = 0; i < NS; i++) {
        float best = -1e30f;
        for (j = 0; j < D; j++) data_x[i][j] = trn_rng_normal(&r);
        for (k = 0; k < C; k++) {
            float s = 0;
            for (j = 0; j < D; j++) s += teacher[k][j] * data_x[i][j];
            if (s > best) { best = s; data_y[i] = k; }
        }
    }
}

static void loader_new_epoch(loader *L) {
    int i;
    L->rng_at_epoch = L->rng.state;
    for (i = 0; i < NS; i++) L->perm[i] = i;
    trn_rng_shuffle(&L->rng, L->perm, NS);
    L->pos = 0;
}

static void loader_next(loader *L, trn_rng *noise, float *x, int *y) {
    int b, j;
    for (b = 0; b < B; b++) {
        int s;
        if (L->pos == NS) { L->epoch++; loader_new_epoch(L); }
        s = L->perm[L->pos++];
        for (j = 0; j < D; j++) x[b * D + j] = data_x[s][j] + 0.1f * trn_rng_normal(noise);
        y[b] = data_y[s];
    }
}

typedef struct net { trn_model m; trn_tensor *w1, *b1, *w2, *b2, *w3, *b3; } net;

static void net_init(net *n) {
    trn_rng r;
    trn_model_init(&n->m, NULL);
    n->w1 = trn_param2(&n->m, "fc1.weight", H, D);
    n->b1 = trn_param1(&n->m, "fc1.bias", H);
    n->w2 = trn_param2(&n->m, "fc2.weight", H, H);
    n->b2 = trn_param1(&n->m, "fc2.bias", H);
    n->w3 = trn_param2(&n->m, "out.weight", C, H);
    n->b3 = trn_param1(&n->m, "out.bias", C);
    if (trn_model_alloc(&n->m) != TRN_OK) trn_fatal("%s", trn_error_reason());
    trn_rng_seed(&r, 42);
    trn_init_normal(&n->m, n->w1, 0.0f, 0.25f, &r);
    trn_init_normal(&n->m, n->w2, 0.0f, 0.125f, &r);
    trn_init_normal(&n->m, n->w3, 0.0f, 0.125f, &r);
}

/* train to cfg->steps, resuming from cfg->dir if it holds a checkpoint.
   losses[s] gets step s's loss; returns 0, or 2 with a message. */
static void sleep_ms(int ms);
static int train(const run_cfg *cfg, float *losses, uint32_t *final_crc) {
    net n;
    trn_adamw opt;
    trn_adamw_desc desc;
    loader L;
    trn_rng noise;
    static trn_meta meta;
    char path[1100];
    float x[B * D];
    int y[B], step = 0, shape[2] = {B, D};
    long long found;
    trn_result r;
    trn_ckpt_async ack;

    memset(&ack, 0, sizeof ack);
    ack.keep = cfg->keep;
    net_init(&n);
    memset(&desc, 0, sizeof desc);
    desc.weight_decay = 0.05f;
    trn_adamw_init(&opt, &desc);
    memset(&L, 0, sizeof L);
    trn_rng_seed(&L.rng, 7);
    trn_rng_seed(&noise, 8);
    loader_new_epoch(&L);

    r = trn_checkpoint_latest(cfg->dir, path, sizeof path, &found);
    if (r == TRN_OK) {
        uint64_t s, pos, ep, lr, nr;
        if (trn_checkpoint_load(path, &n.m, &opt, &meta) != TRN_OK ||
            trn_meta_get_u64(&meta, "step", &s) || trn_meta_get_u64(&meta, "loader.pos", &pos) ||
            trn_meta_get_u64(&meta, "loader.epoch", &ep) || trn_meta_get_u64(&meta, "loader.rng_at_epoch", &lr) ||
            trn_meta_get_u64(&meta, "noise.rng", &nr)) {
            fprintf(stderr, "test_resume: %s\n", trn_error_reason());
            return 2;
        }
        step = (int)s;
        L.rng.state = lr;
        loader_new_epoch(&L); /* the same permutation as before the stop */
        L.pos = (int)pos;
        L.epoch = (int)ep;
        noise.state = nr;
        if (!cfg->quiet) printf("resumed from step %d (%s)\n", step, path);
    } else if (r != TRN_ERR_IO) { /* checkpoints exist but none is valid: do not start over silently */
        fprintf(stderr, "test_resume: %s\n", trn_error_reason());
        return 2;
    } else if (!cfg->quiet) {
        printf("fresh start\n");
    }
    fflush(stdout);

    for (; step < cfg->steps; step++) {
        trn_tensor *xin, *h, *logits, *loss;
        float lr = trn_lr_schedule(step, 5, cfg->steps, 1e-2f, 1e-3f);
        loader_next(&L, &noise, x, y);
        trn_reset(&n.m);
        trn_zero_grad(&n.m);
        xin = trn_input(&n.m, "x", 2, shape, x);
        h = trn_gelu(&n.m, trn_linear(&n.m, xin, n.w1, n.b1));
        h = trn_relu(&n.m, trn_linear(&n.m, h, n.w2, n.b2));
        logits = trn_linear(&n.m, h, n.w3, n.b3);
        loss = trn_cross_entropy(&n.m, logits, y, C);
        if (cfg->step_ms) sleep_ms(cfg->step_ms); /* between forward and backward */
        trn_backward(&n.m, loss);
        trn_clip_grad_norm(&n.m, 1.0f);
        if (trn_adamw_step(&opt, &n.m, lr) != TRN_OK) { fprintf(stderr, "test_resume: %s\n", trn_error_reason()); return 2; }
        losses[step] = trn_item(&n.m, loss);
        if (!cfg->quiet) { printf("step %d loss %a\n", step, (double)losses[step]); fflush(stdout); }
        if ((step + 1) % cfg->every == 0) {
            trn_meta_set_u64(&meta, "step", (uint64_t)(step + 1));
            trn_meta_set_u64(&meta, "loader.pos", (uint64_t)L.pos);
            trn_meta_set_u64(&meta, "loader.epoch", (uint64_t)L.epoch);
            trn_meta_set_u64(&meta, "loader.rng_at_epoch", L.rng_at_epoch);
            trn_meta_set_u64(&meta, "noise.rng", noise.state);
            trn_meta_set(&meta, "config", "{\"model\": \"mlp 16-64-64-8\", \"batch\": 16}");
            r = cfg->async ? trn_checkpoint_save_async(&ack, cfg->dir, step + 1, &n.m, &opt, &meta)
                           : trn_checkpoint_save_dir(cfg->dir, step + 1, cfg->keep, &n.m, &opt, &meta, NULL, 0);
            if (r != TRN_OK) {
                fprintf(stderr, "test_resume: %s\n", trn_error_reason());
                return 2;
            }
        }
        if (cfg->stop_after && step + 1 == cfg->stop_after) { step++; break; }
    }
    if (trn_checkpoint_wait(&ack) != TRN_OK) { fprintf(stderr, "test_resume: %s\n", trn_error_reason()); return 2; }
    trn_ckpt_async_free(&ack);
    if (step == cfg->steps) {
        *final_crc = trn_crc32c(0, n.m.param_data, n.m.n_floats * sizeof(float));
        snprintf(path, sizeof path, "%s/final.safetensors", cfg->dir);
        if (trn_safetensors_save(path, &n.m, NULL) != TRN_OK) { fprintf(stderr, "test_resume: %s\n", trn_error_reason()); return 2; }
        if (!cfg->quiet) printf("final %08x\n", (unsigned)*final_crc);
    }
    trn_adamw_free(&opt);
    trn_model_free(&n.m);
    return 0;
}

static void sleep_ms(int ms) {
    struct timespec ts;
    ts.tv_sec = ms / 1000;
    ts.tv_nsec = (long)(ms % 1000) * 1000000L;
    nanosleep(&ts, NULL);
}

static int verify_all(const char *dir) {
    DIR *d = opendir(dir);
    struct dirent *de;
    char path[1100];
    int n = 0, bad = 0;
    if (!d) { fprintf(stderr, "test_resume: cannot open %s\n", dir); return 2; }
    while ((de = readdir(d)) != NULL) {
        size_t len = strlen(de->d_name);
        if (strncmp(de->d_name, "ckpt_", 5) != 0 || len < 12 || strcmp(de->d_name + len - 12, ".safetensors") != 0) continue;
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        n++;
        if (trn_checkpoint_verify(path) != TRN_OK) { printf("BROKEN %s\n", trn_error_reason()); bad++; }
    }
    closedir(d);
    printf("%d checkpoints, %d broken\n", n, bad);
    return bad ? 1 : 0;
}

/* in-process: stop and resume, compare with an uninterrupted run */
static int self_test(void) {
    char base[] = "/tmp/trn_test_resume_XXXXXX", ref_dir[300], dir[300], cmd[400];
    float ref_loss[40], loss[40];
    uint32_t ref_crc = 0, crc = 0;
    run_cfg cfg;
    int s;
    if (!mkdtemp(base)) { perror("mkdtemp"); return 2; }
    memset(&cfg, 0, sizeof cfg);
    cfg.steps = 30; cfg.every = 5; cfg.keep = 2; cfg.quiet = 1;
    snprintf(ref_dir, sizeof ref_dir, "%s/ref", base);
    cfg.dir = ref_dir;
    CHECK(train(&cfg, ref_loss, &ref_crc) == 0, "uninterrupted run");
    CHECK(ref_loss[29] < ref_loss[0], "it learns: loss %g -> %g", ref_loss[0], ref_loss[29]);

    /* stopped after 13 (resumes from 10) and after 22 (resumes from 20) */
    snprintf(dir, sizeof dir, "%s/run", base);
    cfg.dir = dir;
    memset(loss, 0, sizeof loss);
    cfg.stop_after = 13;
    CHECK(train(&cfg, loss, &crc) == 0, "run stopped at 13");
    cfg.stop_after = 22;
    CHECK(train(&cfg, loss, &crc) == 0, "resumed, stopped at 22");
    cfg.stop_after = 0;
    CHECK(train(&cfg, loss, &crc) == 0, "resumed to the end");
    CHECK(crc == ref_crc, "final weights bit-identical (crc %08x vs %08x)", crc, ref_crc);
    for (s = 0; s < 30; s++)
        if (memcmp(&loss[s], &ref_loss[s], 4) != 0) break;
    CHECK(s == 30, "all 30 losses bit-identical (first difference at step %d)", s);

    /* the newest checkpoint corrupted: resume from the one before, same end */
    {
        char path[400];
        FILE *f;
        snprintf(dir, sizeof dir, "%s/run2", base);
        cfg.stop_after = 22;
        CHECK(train(&cfg, loss, &crc) == 0, "run2 stopped at 22");
        snprintf(path, sizeof path, "%s/ckpt_00000020.safetensors", dir);
        f = fopen(path, "r+b");
        CHECK(f != NULL, "open newest");
        if (f) { fseek(f, -7, SEEK_END); fputc(0x5a, f); fclose(f); }
        printf("  (one 'skipping ... checksum mismatch' line on stderr is expected here)\n");
        fflush(stdout);
        cfg.stop_after = 0;
        CHECK(train(&cfg, loss, &crc) == 0, "resumed past a corrupt newest checkpoint");
        CHECK(crc == ref_crc, "still bit-identical");
    }
    /* the same stops with asynchronous checkpoints: the same end */
    snprintf(dir, sizeof dir, "%s/async", base);
    cfg.dir = dir;
    cfg.async = 1;
    memset(loss, 0, sizeof loss);
    cfg.stop_after = 13;
    CHECK(train(&cfg, loss, &crc) == 0, "async: run stopped at 13");
    cfg.stop_after = 22;
    CHECK(train(&cfg, loss, &crc) == 0, "async: resumed, stopped at 22");
    cfg.stop_after = 0;
    CHECK(train(&cfg, loss, &crc) == 0, "async: resumed to the end");
    CHECK(crc == ref_crc, "async: final weights bit-identical (crc %08x vs %08x)", crc, ref_crc);
    for (s = 0; s < 30; s++)
        if (memcmp(&loss[s], &ref_loss[s], 4) != 0) break;
    CHECK(s == 30, "async: all 30 losses bit-identical (first difference at step %d)", s);
    { /* against the synchronous run stopped at the same steps (same metadata order) */
        char c2[1000];
        snprintf(c2, sizeof c2, "cmp '%s/run/ckpt_00000030.safetensors' '%s/ckpt_00000030.safetensors'", base, dir);
        CHECK(system(c2) == 0, "async: the last checkpoint is byte-identical to the synchronous one");
    }
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", base);
    if (system(cmd) != 0) printf("could not remove %s\n", base);
    return check_summary();
}

static void usage(FILE *to) {
    fprintf(to, "usage: test_resume                       (self-test)\n"
                "       test_resume --dir DIR [--steps N] [--every K] [--keep K] [--threads T] [--step-ms MS]\n"
                "       test_resume --verify-all DIR\n");
}

int main(int argc, char **argv) {
    run_cfg cfg;
    float losses[100000];
    uint32_t crc = 0;
    int i;
    make_data();
    trn_set_threads(1); /* same thread count, same bits: fixed unless --threads */
    if (argc == 1) return self_test();
    memset(&cfg, 0, sizeof cfg);
    cfg.steps = 40; cfg.every = 3; cfg.keep = 2;
    for (i = 1; i < argc; i += 2) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) { usage(stdout); return 0; }
        if (!v) { fprintf(stderr, "test_resume: %s needs a value\n", a); return 2; }
        if (strcmp(a, "--verify-all") == 0) return verify_all(v);
        else if (strcmp(a, "--dir") == 0) cfg.dir = v;
        else if (strcmp(a, "--steps") == 0) cfg.steps = atoi(v);
        else if (strcmp(a, "--every") == 0) cfg.every = atoi(v);
        else if (strcmp(a, "--keep") == 0) cfg.keep = atoi(v);
        else if (strcmp(a, "--threads") == 0) trn_set_threads(atoi(v));
        else if (strcmp(a, "--step-ms") == 0) cfg.step_ms = atoi(v);
        else if (strcmp(a, "--async") == 0) cfg.async = atoi(v);
        else { fprintf(stderr, "test_resume: unknown flag %s\n", a); usage(stderr); return 2; }
    }
    if (!cfg.dir || cfg.steps <= 0 || cfg.steps > 100000 || cfg.every <= 0) {
        fprintf(stderr, "test_resume: need --dir, 0 < --steps <= 100000, --every > 0\n");
        return 2;
    }
    return train(&cfg, losses, &crc);
}
