/* tests/test_loop.c - extras/train_loop.h's pieces and the async/best-K parts of
   >>checkpoint, each against what it promises:
     progress    ETA arithmetic, the line format off a terminal (+ " | eta"),
                 in place on a terminal ("\r" ... "\033[K", a newline on break)
     csv         empty cells for NaN, integers as integers, cut back on resume,
                 a foreign header refused
     tensorboard TFRecord framing: lengths and masked CRC-32C of every record,
                 the Event/Summary protobuf bytes of one scalar
     spike guard no judgement before TRN_SPIKE_MIN values, a spike skipped, a
                 NaN skipped (and kept out of the window), the window saved
                 and restored bit for bit (the same next decision)
     early stop  patience counting, state through trn_meta
     keep-best   the K lowest val_loss as hard links, the worst removed,
                 survivors still verify after ckpt_* pruning
     async save  the file equals a synchronous save byte for byte even when
                 the weights change right after the call; the staging ledger
                 line; a failure in the writer reported by the wait
     profile     rows per op kind, exact arena bytes, one pass per backward,
                 nothing recorded when detached
   tests/test_loop.sh runs the same features end to end in examples/gpt2. */
#define TRAIN_IMPLEMENTATION
#include "train.h"
#include "extras/train_loop.h"
#include "extras/train_run.h"
#include "tests/check.h"

#include <sys/stat.h>
#include <unistd.h>

static char base[] = "/tmp/trn_test_loop_XXXXXX";

static char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    char *p;
    long len;
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    len = ftell(f);
    fseek(f, 0, SEEK_SET);
    p = (char *)malloc((size_t)len + 1);
    if (p && fread(p, 1, (size_t)len, f) != (size_t)len) { free(p); p = NULL; }
    if (p) p[len] = 0;
    fclose(f);
    if (n) *n = (size_t)len;
    return p;
}

static void test_progress(void) {
    trn_progress p;
    char buf[32], *out;
    FILE *f = tmpfile();
    size_t n;
    CHECK(strcmp(trn_duration_str(7, buf, sizeof buf), "0:07") == 0, "7 s -> %s", buf);
    CHECK(strcmp(trn_duration_str(725, buf, sizeof buf), "12:05") == 0, "725 s -> %s", buf);
    CHECK(strcmp(trn_duration_str(10929, buf, sizeof buf), "3:02:09") == 0, "10929 s -> %s", buf);
    CHECK(strcmp(trn_duration_str(-1, buf, sizeof buf), "?") == 0, "unknown -> %s", buf);
    trn_progress_init(&p, 10, 110);
    CHECK(trn_progress_eta(&p, 10) < 0, "no step done yet: unknown ETA");
    p.t0 -= 5.0; /* pretend 5 s passed over 10 steps: 0.5 s per step, 90 steps left */
    CHECK_NEAR(trn_progress_eta(&p, 20), 45.0, 0.2, 0, "ETA = mean step time x steps left");
    CHECK_NEAR(trn_progress_eta(&p, 110), 0.0, 1e-9, 0, "no steps left");
    /* not a terminal: the caller's line + ETA, one line per step */
    p.out = f;
    p.tty = 0;
    trn_progress_step(&p, 20, 2.5f, 1000, "step 20/110 | loss 2.5000");
    p.tty = 1; /* a terminal: in place */
    trn_progress_step(&p, 21, 2.25f, 1234, "ignored");
    trn_progress_step(&p, 22, 2.0f, 1234, "ignored");
    trn_progress_break(&p);
    trn_progress_break(&p); /* once is enough */
    fflush(f);
    n = (size_t)ftell(f);
    rewind(f);
    out = (char *)calloc(n + 1, 1);
    CHECK(fread(out, 1, n, f) == n, "read back");
    CHECK(strncmp(out, "step 20/110 | loss 2.5000 | eta 0:4", 35) == 0, "line + eta: '%.40s'", out);
    CHECK(strstr(out, "\rstep 21/110 [") != NULL && strstr(out, "loss 2.2500 | 1234 tok/s") != NULL, "in-place line");
    CHECK(strstr(out, "\033[K\rstep 22/110") != NULL, "the next step rewrites the same line");
    CHECK(n > 2 && out[n - 1] == '\n' && out[n - 2] == 'K', "break ends the line once");
    free(out);
    fclose(f);
}

static void test_csv(void) {
    char path[300], *s;
    trn_csv c;
    double r1[3] = {1, 2.5, NAN}, r2[3] = {2, 0.125, 3.75}, r3[3] = {3, 1e-3, NAN}, r4[3] = {4, 7, 8};
    snprintf(path, sizeof path, "%s/m.csv", base);
    CHECK(trn_csv_open(&c, path, "step,loss,val_loss", -1) == TRN_OK, "open");
    CHECK(c.n_cols == 3, "3 columns");
    trn_csv_row(&c, r1); trn_csv_row(&c, r2); trn_csv_row(&c, r3); trn_csv_row(&c, r4);
    CHECK(trn_csv_close(&c) == TRN_OK, "close");
    s = slurp(path, NULL);
    CHECK(s && strcmp(s, "step,loss,val_loss\n1,2.5,\n2,0.125,3.75\n3,0.001,\n4,7,8\n") == 0, "content: %s", s ? s : "");
    free(s);
    /* resumed from step 2: rows 3 and 4 were written after that checkpoint */
    CHECK(trn_csv_open(&c, path, "step,loss,val_loss", 2) == TRN_OK, "reopen at step 2");
    trn_csv_row(&c, r3);
    trn_csv_close(&c);
    s = slurp(path, NULL);
    CHECK(s && strcmp(s, "step,loss,val_loss\n1,2.5,\n2,0.125,3.75\n3,0.001,\n") == 0, "cut back: %s", s ? s : "");
    free(s);
    CHECK(trn_csv_open(&c, path, "step,other", 2) == TRN_ERR_MISMATCH, "another header is refused");
    snprintf(path, sizeof path, "%s/fresh.csv", base);
    CHECK(trn_csv_open(&c, path, "a,b", 5) == TRN_OK, "resume with no file yet: a new one");
    trn_csv_close(&c);
}

static uint32_t masked(const void *p, size_t n) {
    uint32_t c = trn_crc32c(0, p, n);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}
static uint32_t le32(const unsigned char *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }

static void test_tensorboard(void) {
    char dir[300];
    trn_tb_writer w;
    unsigned char *b;
    size_t n, at = 0;
    int records = 0, framing_ok = 1;
    const unsigned char *last = NULL;
    size_t last_len = 0;
    snprintf(dir, sizeof dir, "%s/tb/sub", base); /* parents are created */
    CHECK(trn_tb_open(&w, dir) == TRN_OK, "open: %s", trn_error_reason());
    CHECK(strstr(w.path, "/events.out.tfevents.") != NULL, "file name TensorBoard looks for: %s", w.path);
    CHECK(trn_tb_scalar(&w, "loss", 7, 2.5) == TRN_OK, "scalar");
    CHECK(trn_tb_memory(&w, 7) == TRN_OK, "memory scalars");
    CHECK(trn_tb_scalar(&w, "val_loss", 8, 1.25) == TRN_OK, "scalar");
    CHECK(trn_tb_close(&w) == TRN_OK, "close");
    b = (unsigned char *)slurp(w.path, &n);
    CHECK(b != NULL, "read back");
    if (!b) return;
    while (at + 12 <= n) { /* length, its masked CRC, data, its masked CRC */
        uint64_t len = 0;
        int i;
        for (i = 0; i < 8; i++) len |= (uint64_t)b[at + i] << (8 * i);
        if (le32(b + at + 8) != masked(b + at, 8) || at + 12 + len + 4 > n ||
            le32(b + at + 12 + len) != masked(b + at + 12, (size_t)len)) { framing_ok = 0; break; }
        last = b + at + 12;
        last_len = (size_t)len;
        at += 12 + (size_t)len + 4;
        records++;
    }
    CHECK(framing_ok && at == n, "every record framed with the right masked CRCs (%d records, %zu of %zu bytes)", records, at, n);
    CHECK(records >= 4, "file_version + loss + memory + val_loss: %d records", records);
    {
        size_t k;
        int found = 0;
        for (k = 0; k + 13 <= n && !found; k++) found = memcmp(b + k, "brain.Event:2", 13) == 0;
        CHECK(found, "the first event names the file version");
    }
    /* the last record, byte by byte: Event{wall_time, step 8, summary{value{tag "val_loss", simple_value 1.25}}} */
    if (last && last_len == 9 + 2 + 2 + 2 + 10 + 5) {
        static const unsigned char tail[] = {0x10, 8, 0x2a, 17, 0x0a, 15, 0x0a, 8, 'v', 'a', 'l', '_', 'l', 'o', 's', 's',
                                             0x15, 0x00, 0x00, 0xa0, 0x3f};
        CHECK(last[0] == 0x09 && memcmp(last + 9, tail, sizeof tail) == 0, "the val_loss event's protobuf bytes");
    } else {
        CHECK(0, "the val_loss event has %zu bytes, want 30", last_len);
    }
    {
        const unsigned char v[] = "123456789";
        CHECK(masked(v, 9) == (((0xE3069283u >> 15) | (0xE3069283u << 17)) + 0xa282ead8u), "CRC-32C check value");
    }
    free(b);
}

static void test_spike_guard(void) {
    trn_spike_guard g, h;
    trn_meta meta;
    trn_rng r;
    int i, skips = 0;
    trn_rng_seed(&r, 3);
    trn_spike_guard_init(&g, 4.0f);
    CHECK(trn_spike_guard_check(&g, 100.0f, 1.0f) == 0, "nothing to compare with yet: no skip");
    for (i = 1; i < 60; i++) skips += trn_spike_guard_check(&g, 3.0f + 0.05f * trn_rng_normal(&r), 1.0f + 0.1f * trn_rng_normal(&r));
    /* the first value (100) is an outlier in the window for 60 steps: it inflates std, so nothing else is judged a spike */
    CHECK(skips == 0, "ordinary steps are not skipped (%d were)", skips);
    for (i = 0; i < 100; i++) skips += trn_spike_guard_check(&g, 3.0f + 0.05f * trn_rng_normal(&r), 1.0f + 0.1f * trn_rng_normal(&r));
    CHECK(skips == 0, "ordinary steps are not skipped (%d were)", skips);
    CHECK(trn_spike_guard_check(&g, 3.0f, 5.0f) == 1 && g.z_norm > 4, "a norm spike is skipped (z %.1f)", g.z_norm);
    CHECK(g.skipped == 1, "counted");
    CHECK(trn_spike_guard_check(&g, NAN, 1.0f) == 1, "a NaN loss is skipped");
    CHECK(g.n == TRN_SPIKE_WINDOW, "the window is full");
    memset(&meta, 0, sizeof meta);
    trn_spike_guard_save(&g, &meta);
    trn_spike_guard_init(&h, 4.0f);
    CHECK(trn_spike_guard_load(&h, &meta) == TRN_OK, "load");
    CHECK(h.n == g.n && h.pos == g.pos && h.skipped == g.skipped && memcmp(h.loss, g.loss, sizeof h.loss) == 0 &&
              memcmp(h.norm, g.norm, sizeof h.norm) == 0, "window restored bit for bit");
    CHECK(trn_spike_guard_check(&h, 3.2f, 1.3f) == trn_spike_guard_check(&g, 3.2f, 1.3f) &&
              memcmp(&h.z_loss, &g.z_loss, 4) == 0 && memcmp(&h.z_norm, &g.z_norm, 4) == 0, "the same next decision");
    trn_meta_set(&meta, "spike.loss", "zz");
    CHECK(trn_spike_guard_load(&h, &meta) == TRN_ERR_FORMAT, "a malformed window is an error");
    memset(&meta, 0, sizeof meta);
    CHECK(trn_spike_guard_load(&h, &meta) == TRN_OK && h.n == 0, "no keys: an empty window");
    trn_spike_guard_init(&g, 0.0f);
    for (i = 0; i < 50; i++) trn_spike_guard_check(&g, 3.0f, 1.0f + 0.01f * (float)(i % 3));
    CHECK(trn_spike_guard_check(&g, 300.0f, 1.0f) == 0, "z <= 0: off");
}

static void test_early_stop(void) {
    trn_early_stop e, f;
    trn_meta meta;
    trn_early_stop_init(&e, 2);
    CHECK(trn_early_stop_update(&e, 10, 3.0) == 0, "first is the best");
    CHECK(trn_early_stop_update(&e, 20, 2.5) == 0, "better");
    CHECK(trn_early_stop_update(&e, 30, 2.5) == 0 && e.bad == 1, "equal is not better");
    memset(&meta, 0, sizeof meta);
    trn_early_stop_save(&e, &meta);
    trn_early_stop_init(&f, 2);
    CHECK(trn_early_stop_load(&f, &meta) == TRN_OK && f.best == 2.5 && f.best_step == 20 && f.bad == 1, "restored");
    CHECK(trn_early_stop_update(&f, 40, 2.6) == 1, "second without improvement: stop");
    trn_early_stop_init(&e, 0);
    CHECK(trn_early_stop_update(&e, 1, 5) == 0 && trn_early_stop_update(&e, 2, 6) == 0 && trn_early_stop_update(&e, 3, 7) == 0,
          "patience 0: never");
}

/* a small model with AdamW moments */
typedef struct tiny { trn_model m; trn_tensor *w, *b; trn_adamw opt; } tiny;
static void tiny_init(tiny *t, int steps) {
    trn_rng r;
    float x[8 * 16], y[8 * 4];
    int i, shape[2] = {8, 16};
    trn_model_init(&t->m, NULL);
    t->w = trn_param2(&t->m, "w", 4, 16);
    t->b = trn_param1(&t->m, "b", 4);
    if (trn_model_alloc(&t->m) != TRN_OK) trn_fatal("%s", trn_error_reason());
    trn_rng_seed(&r, 5);
    trn_init_normal(&t->m, t->w, 0, 0.3f, &r);
    for (i = 0; i < 8 * 16; i++) x[i] = trn_rng_normal(&r);
    for (i = 0; i < 8 * 4; i++) y[i] = trn_rng_normal(&r);
    trn_adamw_init(&t->opt, NULL);
    for (i = 0; i < steps; i++) {
        trn_tensor *loss;
        trn_reset(&t->m);
        trn_zero_grad(&t->m);
        loss = trn_mse(&t->m, trn_linear(&t->m, trn_input(&t->m, "x", 2, shape, x), t->w, t->b), y);
        trn_backward(&t->m, loss);
        trn_adamw_step(&t->opt, &t->m, 1e-2f);
    }
}
static void tiny_free(tiny *t) { trn_adamw_free(&t->opt); trn_model_free(&t->m); }

static int same_file(const char *a, const char *b) {
    size_t na, nb;
    char *x = slurp(a, &na), *y = slurp(b, &nb);
    int same = x && y && na == nb && memcmp(x, y, na) == 0;
    free(x); free(y);
    return same;
}

static void test_keep_best(void) {
    char dir[300], path[400];
    static const double vals[] = {3.0, 2.0, 2.5, 1.0, 4.0};
    tiny t;
    trn_meta meta;
    struct stat a, b;
    int i;
    tiny_init(&t, 2);
    snprintf(dir, sizeof dir, "%s/best", base);
    for (i = 0; i < 5; i++) {
        memset(&meta, 0, sizeof meta);
        trn_meta_set_f64(&meta, "val_loss", vals[i]);
        CHECK(trn_checkpoint_save_dir(dir, 10 * (i + 1), 1, &t.m, &t.opt, &meta, path, sizeof path) == TRN_OK, "save");
        CHECK(trn_checkpoint_keep_best(dir, path, 2) == TRN_OK, "keep-best: %s", trn_error_reason());
    }
    /* the two lowest: 1.0 at step 40 and 2.0 at step 20 */
    for (i = 0; i < 5; i++) {
        int want = i == 1 || i == 3;
        snprintf(path, sizeof path, "%s/best_%08d.safetensors", dir, 10 * (i + 1));
        CHECK((access(path, F_OK) == 0) == want, "best_%d %s", 10 * (i + 1), want ? "kept" : "removed");
        if (want) CHECK(trn_checkpoint_verify(path) == TRN_OK, "best_%d verifies after ckpt_ pruning", 10 * (i + 1));
    }
    snprintf(path, sizeof path, "%s/ckpt_%08d.safetensors", dir, 20);
    CHECK(access(path, F_OK) != 0, "keep 1 pruned ckpt_20 (its best_ name lives on)");
    snprintf(path, sizeof path, "%s/ckpt_%08d.safetensors", dir, 50);
    {
        char bp[400];
        snprintf(bp, sizeof bp, "%s/best_%08d.safetensors", dir, 40);
        CHECK(stat(bp, &a) == 0 && a.st_nlink == 1, "best_40 is now the only name of its file");
        memset(&meta, 0, sizeof meta);
        trn_meta_set_f64(&meta, "val_loss", 0.5);
        CHECK(trn_checkpoint_save_dir(dir, 60, 0, &t.m, &t.opt, &meta, path, sizeof path) == TRN_OK, "save 60");
        CHECK(trn_checkpoint_keep_best(dir, path, 2) == TRN_OK, "keep-best 60");
        snprintf(bp, sizeof bp, "%s/best_%08d.safetensors", dir, 60);
        CHECK(stat(path, &a) == 0 && stat(bp, &b) == 0 && a.st_ino == b.st_ino, "a hard link: no bytes copied");
    }
    memset(&meta, 0, sizeof meta);
    CHECK(trn_checkpoint_save_dir(dir, 70, 0, &t.m, &t.opt, &meta, path, sizeof path) == TRN_OK, "save 70");
    CHECK(trn_checkpoint_keep_best(dir, path, 2) == TRN_ERR_INVALID, "no val_loss in the metadata: an error");
    tiny_free(&t);
}

static void test_async(void) {
    char da[300], db[300], pa[400], pb[400];
    tiny t;
    trn_meta meta;
    trn_ckpt_async ck;
    size_t staged;
    int i;
    tiny_init(&t, 3);
    snprintf(da, sizeof da, "%s/async", base);
    snprintf(db, sizeof db, "%s/sync", base);
    memset(&meta, 0, sizeof meta);
    trn_meta_set(&meta, "note", "the same");
    CHECK(trn_checkpoint_save_dir(db, 3, 2, &t.m, &t.opt, &meta, pb, sizeof pb) == TRN_OK, "sync save");
    memset(&ck, 0, sizeof ck);
    ck.keep = 2;
    setenv("TRN_CKPT_TEST_DELAY_MS", "30", 1); /* a slow writer: training really goes on during the write */
    CHECK(trn_checkpoint_save_async(&ck, da, 3, &t.m, &t.opt, &meta) == TRN_OK, "async save: %s", trn_error_reason());
    CHECK(ck.in_flight == 1, "in flight after the call");
    staged = (t.m.n_floats + 2 * (t.opt.hi - t.opt.lo)) * sizeof(float);
    CHECK(trn_ledger_current(TRN_HOST, TRN_KIND_STAGING) == staged, "the staging copy is its own ledger line: %zu bytes",
          trn_ledger_current(TRN_HOST, TRN_KIND_STAGING));
    CHECK(strcmp(trn_kind_name(TRN_KIND_STAGING), "staging") == 0, "its name");
    /* training goes on: the weights and the meta table change at once */
    for (i = 0; i < (int)t.m.n_floats; i++) t.m.param_data[i] += 1.0f;
    trn_meta_set(&meta, "note", "changed");
    CHECK(trn_checkpoint_wait(&ck) == TRN_OK, "wait: %s", trn_error_reason());
    CHECK(ck.in_flight == 0 && ck.write_seconds > 0.02, "the writer took the delay (%.3f s)", ck.write_seconds);
    snprintf(pa, sizeof pa, "%s/ckpt_00000003.safetensors", da);
    CHECK(same_file(pa, pb), "the async file is byte-identical to the synchronous one (the state at the call)");
    CHECK(trn_checkpoint_wait(&ck) == TRN_OK, "a second wait: nothing in flight");
    /* two saves in a row: the second waits for the first; keep 2 prunes */
    CHECK(trn_checkpoint_save_async(&ck, da, 4, &t.m, &t.opt, &meta) == TRN_OK, "save 4");
    CHECK(trn_checkpoint_save_async(&ck, da, 5, &t.m, &t.opt, &meta) == TRN_OK, "save 5");
    CHECK(ck.wait_seconds > 0.01, "save 5 waited for save 4 (%.3f s)", ck.wait_seconds);
    CHECK(trn_checkpoint_wait(&ck) == TRN_OK, "wait 5");
    CHECK(access(pa, F_OK) != 0, "keep 2: ckpt 3 pruned by the writer");
    {
        long long s = 0;
        char latest[400];
        CHECK(trn_checkpoint_latest(da, latest, sizeof latest, &s) == TRN_OK && s == 5, "latest is 5");
    }
    /* a failure inside the writer: the directory disappears under it */
    CHECK(trn_checkpoint_save_async(&ck, da, 6, &t.m, &t.opt, &meta) == TRN_OK, "save 6 starts");
    {
        char cmd[400];
        int tries = 0;
        /* rm -rf can lose a race with the writer creating its .tmp file
           between rm's listing and its rmdir ("Directory not empty"): again */
        snprintf(cmd, sizeof cmd, "rm -rf '%s' 2>/dev/null", da);
        while (system(cmd) != 0 && ++tries < 20) usleep(1000);
        CHECK(access(da, F_OK) != 0, "remove the directory during the write (%d retries)", tries);
    }
    CHECK(trn_checkpoint_wait(&ck) == TRN_ERR_IO, "the writer's error comes back from wait");
    CHECK(strstr(trn_error_reason(), "ckpt_00000006") != NULL, "naming the file: %s", trn_error_reason());
    unsetenv("TRN_CKPT_TEST_DELAY_MS");
    trn_ckpt_async_free(&ck);
    CHECK(trn_ledger_current(TRN_HOST, TRN_KIND_STAGING) == 0, "staging freed");
    {
        char f[400];
        FILE *fp;
        snprintf(f, sizeof f, "%s/afile", base);
        fp = fopen(f, "w");
        if (fp) fclose(fp);
        CHECK(trn_checkpoint_save_async(&ck, f, 1, &t.m, &t.opt, NULL) == TRN_ERR_IO, "a file as the directory: refused at once");
        trn_ckpt_async_free(&ck);
    }
    tiny_free(&t);
}

static void test_profile(void) {
    trn_model m;
    trn_profile prof;
    trn_tensor *w1, *w2, *x, *h, *loss;
    float xin[4 * 8] = {0}, y[4 * 3] = {0};
    int shape[2] = {4, 8}, i, r, lin = -1;
    trn_rng rng;
    char buf[4096];
    FILE *f;
    trn_model_init(&m, NULL);
    w1 = trn_param2(&m, "w1", 16, 8);
    w2 = trn_param2(&m, "w2", 3, 16);
    trn_model_alloc(&m);
    trn_rng_seed(&rng, 1);
    trn_init_normal(&m, w1, 0, 0.3f, &rng);
    trn_init_normal(&m, w2, 0, 0.3f, &rng);
    trn_profile_attach(&prof, &m);
    CHECK(m.profile == &prof, "attached");
    for (i = 0; i < 3; i++) {
        trn_reset(&m);
        trn_zero_grad(&m);
        x = trn_input(&m, "x", 2, shape, xin);
        h = trn_relu(&m, trn_linear(&m, x, w1, NULL));
        loss = trn_mse(&m, trn_linear(&m, h, w2, NULL), y);
        trn_backward(&m, loss);
    }
    m.grad_enabled = 0; /* evaluation: no tape, nothing profiled */
    trn_reset(&m);
    trn_linear(&m, x, w1, NULL);
    m.grad_enabled = 1;
    CHECK(prof.passes == 3, "one pass per backward: %lld", prof.passes);
    for (r = 0; r < prof.n_rows; r++) if (strcmp(prof.rows[r].op, "linear") == 0) lin = r;
    CHECK(prof.n_rows == 3 && lin >= 0, "rows: linear, relu, mse (%d rows)", prof.n_rows);
    if (lin >= 0) {
        trn_profile_row *row = &prof.rows[lin];
        /* forward: trn_input's x (4x8 floats = 128 B) + out (4x16 = 256 B), then out (4x3 -> 48 B, arena rounds to 64) */
        CHECK(row->calls[0] == 6 && row->calls[1] == 6, "2 linears x 3 passes, forward and backward");
        CHECK(row->bytes[0] == 3.0 * (128 + 256 + 64), "forward arena bytes %.0f", row->bytes[0]);
        /* backward: grad of h (4x16 = 256 B); x needs none; w1, w2 grads live in the flat buffer */
        CHECK(row->bytes[1] == 3.0 * 256, "backward arena bytes %.0f", row->bytes[1]);
        CHECK(row->ms[0] >= 0 && row->ms[1] >= 0, "times");
    }
    f = tmpfile();
    trn_profile_print(&prof, f);
    rewind(f);
    buf[fread(buf, 1, sizeof buf - 1, f)] = 0;
    fclose(f);
    CHECK(strstr(buf, "3 backward passes") && strstr(buf, "linear") && strstr(buf, "mse") && strstr(buf, "total"), "table:\n%s", buf);
    trn_profile_free(&prof);
    CHECK(m.profile == NULL, "detached");
    trn_reset(&m); /* detached: the tape runs as before */
    h = trn_linear(&m, trn_input(&m, "x", 2, shape, xin), w1, NULL);
    CHECK(m.tape_len == 1, "recorded without a profile");
    trn_model_free(&m);
}

int main(void) {
    char cmd[400];
    if (!mkdtemp(base)) { perror("mkdtemp"); return 2; }
    test_progress();
    test_csv();
    test_tensorboard();
    test_spike_guard();
    test_early_stop();
    test_keep_best();
    test_async();
    test_profile();
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", base);
    if (system(cmd) != 0) printf("could not remove %s\n", base);
    return check_summary();
}
