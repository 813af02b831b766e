/* extras/train_run.h - a companion of train.h: run directories: keep-K checkpoints, resume from the newest good one, keep-best, the background checkpoint writer

   Do this:
      #define TRAIN_IMPLEMENTATION
      #include "train.h"
      #include "extras/train_run.h"
   in the one C or C++ file that implements train.h; every other file
   includes both plainly. This header's implementation comes with train.h's
   (it uses train.h's private checkpoint writer, the one trn_checkpoint_save
   runs), so it needs no macro of its own; TRAIN_RUN_IMPLEMENTATION is
   accepted and must sit in the same file as TRAIN_IMPLEMENTATION.

   train.h writes and reads one checkpoint file (trn_checkpoint_save and
   _load: atomic, checksummed); this file manages a directory of them for
   a run. Nothing in train.h, train_cuda.h or train_nccl.h calls this file
   (train_nccl.h's sharded checkpoints are directories of their own, built
   on train.h's calls): it is a leaf, used by the examples and by your
   program if you want it. Why a companion: docs/DESIGN-notes.md.

   Contents (grep for the anchors):
      >>run         DIR/ckpt_<step>: save with keep-K, the newest that
                    verifies (resume), best-K by validation loss, async
                    saves (a background writer thread)

   License: MIT, as train.h.
*/
#ifndef TRAIN_H_INCLUDED
#error "extras/train_run.h: include train.h first"
#endif
#ifndef TRAIN_RUN_H_INCLUDED
#define TRAIN_RUN_H_INCLUDED

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------
   >>run
   Run directories: DIR/ckpt_<step, 8+ digits>.safetensors.
   save_dir creates DIR if needed, writes the checkpoint atomically, reads
   it back to verify it, and only then deletes older checkpoints so that
   the newest `keep` remain (keep <= 0: keep all; checkpoints with a larger
   step than this one, left by an earlier run, are neither counted nor
   deleted) together with stale "*.tmp.<pid>" files of dead processes.
   The written path goes to path_out (may be NULL). */
TRNDEF trn_result trn_checkpoint_save_dir(const char *dir, long long step, int keep, trn_model *m,
                                          const trn_adamw *opt, const trn_meta *meta,
                                          char *path_out, size_t path_cap);
/* The newest checkpoint in DIR that verifies; broken ones are skipped with
   a line on stderr. TRN_ERR_IO: DIR holds no checkpoint at all (start
   fresh). Another error: there are checkpoints but none is valid (do not
   start fresh silently); the reason names the newest one's problem. */
TRNDEF trn_result trn_checkpoint_latest(const char *dir, char *path_out, size_t path_cap,
                                        long long *step_out);

/* Asynchronous checkpoints (torchtitan's async mode): training waits only
   for a copy of its state into a host staging buffer (one ledger line of
   its own, "staging"; allocated on the first save and reused), then goes
   on while a background thread writes that copy to DIR/ckpt_<step> with
   every rule of trn_checkpoint_save_dir: temp file, checksum, fsync,
   rename, read-back, keep-K, and then keep-best. At most one save is in
   flight: a new save first waits for the previous one. A kill -9 during
   the write leaves the older checkpoints as they were.

      trn_ckpt_async ck = {0};  ck.keep = 3;         // zero = defaults
      trn_checkpoint_save_async(&ck, dir, step, &model, &opt, &meta);
      ... train on ...
      trn_checkpoint_wait(&ck);  trn_ckpt_async_free(&ck);   // before exit

   A failed write is reported by the next save or wait (its result and
   reason). The staging buffer holds the weights and AdamW's m and v: as
   much host memory again as the state being saved. On CUDA set host_alloc
   to trn_cuda_host_alloc (pinned memory: the copy runs at full PCIe speed). */
struct trn__ckpt_job;
typedef struct trn_ckpt_async {
    int keep;                   /* newest checkpoints kept (<= 0: all)     */
    int keep_best;              /* > 0: trn_checkpoint_keep_best(K) too    */
    void *(*host_alloc)(size_t bytes, trn_kind kind); /* NULL: trn_alloc  */
    void (*host_free)(void *p);                        /* NULL: trn_free   */
    /* read-only */
    float *stage;               /* the staging copy (host memory)          */
    size_t stage_floats;
    int in_flight;              /* a save is being written now             */
    long long saves;            /* saves started                           */
    double stage_seconds;       /* last save: training waited this long    */
    double wait_seconds;        /*   of which for the previous save       */
    double write_seconds;       /* last finished save: the writer's time   */
    char path[1100];            /* last save's file                        */
    struct trn__ckpt_job *job;
} trn_ckpt_async;
TRNDEF trn_result trn_checkpoint_save_async(trn_ckpt_async *a, const char *dir, long long step, trn_model *m,
                                            const trn_adamw *opt, const trn_meta *meta);
/* wait for the save in flight (none: TRN_OK at once); its result */
TRNDEF trn_result trn_checkpoint_wait(trn_ckpt_async *a);
TRNDEF void trn_ckpt_async_free(trn_ckpt_async *a); /* waits, frees staging */

/* Best-K checkpoints by validation loss (Lightning's ModelCheckpoint with
   save_top_k). `path` is a checkpoint whose metadata holds "val_loss" (a
   number: trn_meta_set_f64(meta, "val_loss", v) before saving). If it is
   among the K lowest of DIR/best_<step>.safetensors, it is hard-linked
   there (no bytes copied; keep-K pruning of ckpt_* then leaves it alone)
   and the worst beyond K are deleted. The ranking is read from the files,
   so it survives a resume. */
TRNDEF trn_result trn_checkpoint_keep_best(const char *dir, const char *path, int k);

/* <<run declarations end */

#ifdef __cplusplus
}
#endif
#endif /* TRAIN_RUN_H_INCLUDED */

#if defined(TRAIN_RUN_IMPLEMENTATION) && !defined(TRAIN_IMPLEMENTATION)
#error "extras/train_run.h: TRAIN_RUN_IMPLEMENTATION needs TRAIN_IMPLEMENTATION in the same file (define it before train.h)"
#endif
#ifdef TRAIN_IMPLEMENTATION
#ifndef TRAIN_IMPLEMENTATION_DONE
#error "extras/train_run.h: train.h's implementation is not in this file (define TRAIN_IMPLEMENTATION before the first #include \"train.h\")"
#endif
#ifndef TRAIN_RUN_IMPLEMENTATION_DONE
#define TRAIN_RUN_IMPLEMENTATION_DONE

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef TRN__HAVE_PTHREAD
#include <pthread.h>
#endif

/* >>run implementation */
/* ========================================================================
   >>run
   ======================================================================== */
/* --- run directories ------------------------------------------------------- */
/* "ckpt_<digits>.safetensors" -> step; 0 if the name is anything else */
static int trn__ckpt_name_step(const char *name, long long *step) {
    const char *p = name;
    long long s = 0;
    if (strncmp(p, "ckpt_", 5) != 0) return 0;
    p += 5;
    if (*p < '0' || *p > '9') return 0;
    while (*p >= '0' && *p <= '9') {
        if (s > 100000000000000000LL) return 0;
        s = s * 10 + (*p++ - '0');
    }
    if (strcmp(p, ".safetensors") != 0) return 0;
    *step = s;
    return 1;
}

static int trn__cmp_ll_desc(const void *a, const void *b) {
    long long x = *(const long long *)a, y = *(const long long *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* the steps of DIR's checkpoints, newest first; n = -1 if DIR cannot be read */
static long long *trn__ckpt_list(const char *dir, int *n) {
    DIR *d = opendir(dir);
    struct dirent *de;
    long long *steps = NULL, s;
    int cap = 0;
    *n = 0;
    if (!d) { *n = -1; return NULL; }
    while ((de = readdir(d)) != NULL) {
        if (!trn__ckpt_name_step(de->d_name, &s)) continue;
        if (!trn__grow((void **)&steps, &cap, *n, sizeof(long long))) break;
        steps[(*n)++] = s;
    }
    closedir(d);
    if (*n > 1) qsort(steps, (size_t)*n, sizeof(long long), trn__cmp_ll_desc);
    return steps;
}

static trn_result trn__ckpt_path(char *out, size_t cap, const char *dir, long long step) {
    if ((size_t)snprintf(out, cap, "%s/ckpt_%08lld.safetensors", dir, step) >= cap)
        return trn_fail(TRN_ERR_INVALID, "checkpoint path in %s is too long", dir);
    return TRN_OK;
}

/* remove "*.safetensors.tmp.<pid>" (checkpoints, best_*, the final
   model.safetensors) left by processes that died mid-save */
static void trn__ckpt_clean_tmp(const char *dir) {
    DIR *d = opendir(dir);
    struct dirent *de;
    char path[1100];
    if (!d) return;
    while ((de = readdir(d)) != NULL) {
        const char *t = strstr(de->d_name, ".safetensors.tmp.");
        long pid;
        char *end;
        if (!t) continue;
        pid = strtol(t + 17, &end, 10);
        if (*end || pid <= 0 || pid == (long)getpid()) continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue; /* alive, or not ours to judge */
        if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, de->d_name) < sizeof path) unlink(path);
    }
    closedir(d);
}

static trn_result trn__ckpt_dir_finish(const char *dir, const char *path, long long step, int keep);
TRNDEF trn_result trn_checkpoint_save_dir(const char *dir, long long step, int keep, trn_model *m,
                                          const trn_adamw *opt, const trn_meta *meta, char *path_out, size_t path_cap) {
    char path[1100];
    trn_result r;
    if (!dir || step < 0) return trn_fail(TRN_ERR_INVALID, "trn_checkpoint_save_dir: no directory or step %lld < 0", step);
    if ((r = trn_mkdirs(dir)) != TRN_OK) return r;
    if ((r = trn__ckpt_path(path, sizeof path, dir, step)) != TRN_OK) return r;
    if ((r = trn_checkpoint_save(path, m, opt, meta)) != TRN_OK) return r;
    if ((r = trn__ckpt_dir_finish(dir, path, step, keep)) != TRN_OK) return r;
    if (path_out && path_cap) snprintf(path_out, path_cap, "%s", path);
    return TRN_OK;
}

/* after a save into DIR: verify, prune to the newest `keep`, clean temps */
static trn_result trn__ckpt_dir_finish(const char *dir, const char *path, long long step, int keep) {
    char old[1100];
    trn_result r;
    long long *steps;
    int n, i, kept = 1;
    /* read it back before deleting anything: the older ones stay until this one is known good */
    if ((r = trn_checkpoint_verify(path)) != TRN_OK) return r;
    steps = trn__ckpt_list(dir, &n);
    for (i = 0; i < n; i++) {
        if (steps[i] >= step) continue; /* this one, or newer ones of an earlier run */
        if (keep > 0 && kept < keep) { kept++; continue; }
        if (keep > 0 && trn__ckpt_path(old, sizeof old, dir, steps[i]) == TRN_OK && unlink(old) != 0)
            fprintf(stderr, "train.h: could not delete old checkpoint %s: %s\n", old, strerror(errno));
    }
    trn_free(steps);
    trn__ckpt_clean_tmp(dir);
    return TRN_OK;
}

TRNDEF trn_result trn_checkpoint_latest(const char *dir, char *path_out, size_t path_cap, long long *step_out) {
    char path[1100], first[512];
    trn_result r, first_r = TRN_OK;
    long long *steps;
    int n, i;
    if (!dir || !path_out || !path_cap) return trn_fail(TRN_ERR_INVALID, "trn_checkpoint_latest: NULL argument");
    steps = trn__ckpt_list(dir, &n);
    if (n <= 0) {
        trn_free(steps);
        return trn_fail(TRN_ERR_IO, "no checkpoint in %s%s", dir, n < 0 ? " (cannot open the directory)" : "");
    }
    first[0] = 0;
    for (i = 0; i < n; i++) {
        if ((r = trn__ckpt_path(path, sizeof path, dir, steps[i])) == TRN_OK) r = trn_checkpoint_verify(path);
        if (r == TRN_OK) {
            snprintf(path_out, path_cap, "%s", path);
            if (step_out) *step_out = steps[i];
            trn_free(steps);
            return TRN_OK;
        }
        fprintf(stderr, "train.h: skipping a broken checkpoint: %s\n", trn_error_reason());
        if (first_r == TRN_OK) { first_r = r; snprintf(first, sizeof first, "%s", trn_error_reason()); }
    }
    trn_free(steps);
    return trn_fail(first_r, "no valid checkpoint in %s (%d broken; newest: %s)", dir, n, first);
}
/* --- best-K by validation loss -------------------------------------------- */
/* "best_<digits>.safetensors" -> step; 0 if the name is anything else */
static int trn__best_name_step(const char *name, long long *step) {
    char buf[300];
    if (strncmp(name, "best_", 5) != 0 || strlen(name) >= sizeof buf - 5) return 0;
    snprintf(buf, sizeof buf, "ckpt_%s", name + 5);
    return trn__ckpt_name_step(buf, step);
}

static trn_result trn__val_loss_of(const char *path, double *val) {
    trn_safetensors f;
    const char *s;
    char *end;
    trn_result r = trn_safetensors_open(&f, path);
    if (r != TRN_OK) return r;
    s = trn_safetensors_meta(&f, "val_loss");
    if (!s) r = trn_fail(TRN_ERR_INVALID, "%s: no \"val_loss\" in its metadata (keep-best ranks by it)", path);
    else {
        *val = strtod(s, &end);
        if (!*s || *end) r = trn_fail(TRN_ERR_FORMAT, "%s: val_loss '%.40s' is not a number", path, s);
    }
    trn_safetensors_close(&f);
    return r;
}

TRNDEF trn_result trn_checkpoint_keep_best(const char *dir, const char *path, int k) {
    DIR *d;
    struct dirent *de;
    char best[1100];
    double val, *vals = NULL;
    long long *steps = NULL, step, s;
    int n = 0, cap = 0, capv = 0, i, have = 0;
    trn_result r;
    const char *base;
    if (!dir || !path || k <= 0) return trn_fail(TRN_ERR_INVALID, "trn_checkpoint_keep_best: NULL argument or k %d <= 0", k);
    base = strrchr(path, '/');
    base = base ? base + 1 : path;
    if (!trn__ckpt_name_step(base, &step))
        return trn_fail(TRN_ERR_INVALID, "trn_checkpoint_keep_best: %s is not a ckpt_<step>.safetensors", path);
    if ((r = trn__val_loss_of(path, &val)) != TRN_OK) return r;
    if (!(val == val)) return TRN_OK; /* NaN is never among the best */
    /* the best files there now, with their losses (read from their headers) */
    if (!(d = opendir(dir))) return trn_fail(TRN_ERR_IO, "keep-best: cannot open %s: %s", dir, strerror(errno));
    while ((de = readdir(d)) != NULL) {
        double v;
        if (!trn__best_name_step(de->d_name, &s)) continue;
        if (s == step) have = 1;
        snprintf(best, sizeof best, "%s/%s", dir, de->d_name);
        if (trn__val_loss_of(best, &v) != TRN_OK) {
            fprintf(stderr, "train.h: keep-best: ignoring %s: %s\n", best, trn_error_reason());
            continue;
        }
        if (!trn__grow((void **)&steps, &cap, n, sizeof(long long)) || !trn__grow((void **)&vals, &capv, n, sizeof(double))) {
            closedir(d);
            trn_free(steps); trn_free(vals);
            return trn_fail(TRN_ERR_NOMEM, "keep-best: out of memory");
        }
        steps[n] = s;
        vals[n++] = v;
    }
    closedir(d);
    if (!have) { /* add this one: a second name for the same file */
        if ((size_t)snprintf(best, sizeof best, "%s/best_%08lld.safetensors", dir, step) >= sizeof best) {
            trn_free(steps); trn_free(vals);
            return trn_fail(TRN_ERR_INVALID, "keep-best: path too long");
        }
        if (link(path, best) != 0 && errno != EEXIST) {
            r = trn_fail(TRN_ERR_IO, "keep-best: link %s to %s: %s (the file system must support hard links)", path,
                         best, strerror(errno));
            trn_free(steps); trn_free(vals);
            return r;
        }
        if (!trn__grow((void **)&steps, &cap, n, sizeof(long long)) || !trn__grow((void **)&vals, &capv, n, sizeof(double))) {
            trn_free(steps); trn_free(vals);
            return trn_fail(TRN_ERR_NOMEM, "keep-best: out of memory");
        }
        steps[n] = step;
        vals[n++] = val;
    }
    /* drop the worst (highest loss; on a tie the newer) until k remain */
    while (n > k) {
        int w = 0;
        for (i = 1; i < n; i++)
            if (vals[i] > vals[w] || (vals[i] == vals[w] && steps[i] > steps[w])) w = i;
        snprintf(best, sizeof best, "%s/best_%08lld.safetensors", dir, steps[w]);
        if (unlink(best) != 0 && errno != ENOENT)
            fprintf(stderr, "train.h: keep-best: could not delete %s: %s\n", best, strerror(errno));
        steps[w] = steps[n - 1];
        vals[w] = vals[n - 1];
        n--;
    }
    trn_free(steps);
    trn_free(vals);
    return trn__fsync_dir(path);
}

/* --- asynchronous checkpoints ----------------------------------------------
   The training thread: wait for the previous save, copy weights + m + v
   into the staging buffer (the only time training waits), start the
   writer thread. The writer: trn__st_write from the staging copy (the CPU
   backend's download is a memcpy), then the same finish as save_dir. */
struct trn__ckpt_job {
    char dir[1024], path[1100], reason[512];
    long long step;
    int keep, keep_best, n_items, running;
    trn__st_item *items;     /* src pointers into the staging buffer */
    trn_meta kit, user;
    trn_result result;
    double seconds;
#ifdef TRN__HAVE_PTHREAD
    pthread_t thread;
#endif
};

static void *trn__ckpt_writer(void *arg) {
    struct trn__ckpt_job *j = (struct trn__ckpt_job *)arg;
    double t0 = trn__now();
    trn_result r = trn__st_write(j->path, trn_cpu_backend(), j->items, j->n_items, &j->kit, &j->user);
    if (r == TRN_OK) r = trn__ckpt_dir_finish(j->dir, j->path, j->step, j->keep);
    if (r == TRN_OK && j->keep_best > 0) r = trn_checkpoint_keep_best(j->dir, j->path, j->keep_best);
    if (r != TRN_OK) snprintf(j->reason, sizeof j->reason, "%s", trn_error_reason()); /* reasons are per thread */
    j->result = r;
    j->seconds = trn__now() - t0;
    return NULL;
}

/* the writer is done (joined, or it ran in this thread): collect it */
static trn_result trn__ckpt_collect(trn_ckpt_async *a) {
    struct trn__ckpt_job *j = a->job;
    j->running = 0;
    a->in_flight = 0;
    a->write_seconds = j->seconds;
    trn_free(j->items);
    j->items = NULL;
    if (j->result != TRN_OK) return trn_fail(j->result, "checkpoint %s: %s", j->path, j->reason);
    return TRN_OK;
}

TRNDEF trn_result trn_checkpoint_wait(trn_ckpt_async *a) {
    if (!a || !a->job || !a->job->running) return TRN_OK;
#ifdef TRN__HAVE_PTHREAD
    pthread_join(a->job->thread, NULL);
#endif
    return trn__ckpt_collect(a);
}

TRNDEF trn_result trn_checkpoint_save_async(trn_ckpt_async *a, const char *dir, long long step, trn_model *m,
                                            const trn_adamw *opt, const trn_meta *meta) {
    struct trn__ckpt_job *j;
    trn__st_item *items;
    size_t need = 0, at = 0;
    double t0 = trn__now();
    trn_result r;
    int n, i;
    if (!a || !dir || !m || step < 0) return trn_fail(TRN_ERR_INVALID, "trn_checkpoint_save_async: NULL argument or step < 0");
    /* at most one save in flight: the staging buffer is reused */
    r = trn_checkpoint_wait(a);
    a->wait_seconds = trn__now() - t0;
    if (r != TRN_OK) return r;
    if (!a->job) {
        a->job = (struct trn__ckpt_job *)trn_calloc(sizeof *a->job, TRN_KIND_RUNTIME);
        if (!a->job) return trn_fail(TRN_ERR_NOMEM, "async checkpoint: %s", trn_error_reason());
    }
    j = a->job;
    if ((r = trn_mkdirs(dir)) != TRN_OK) return r;
    if ((size_t)snprintf(j->dir, sizeof j->dir, "%s", dir) >= sizeof j->dir) return trn_fail(TRN_ERR_INVALID, "%s: path too long", dir);
    if ((r = trn__ckpt_path(j->path, sizeof j->path, dir, step)) != TRN_OK) return r;
    memset(&j->user, 0, sizeof j->user);
    if (meta) j->user = *meta; /* the caller may change its table while we write */
    if ((r = trn__ckpt_items(m, opt, &items, &n, &j->kit)) != TRN_OK) return r;
    for (i = 0; i < n; i++) need += items[i].n;
    if (a->stage && a->stage_floats < need) { /* the state grew (AdamW's m, v appeared) */
        if (a->host_free) a->host_free(a->stage); else trn_free(a->stage);
        a->stage = NULL;
    }
    if (!a->stage) {
        a->stage = (float *)(a->host_alloc ? a->host_alloc(need * sizeof(float), TRN_KIND_STAGING)
                                           : trn_alloc(need * sizeof(float), TRN_KIND_STAGING));
        if (!a->stage) {
            trn_free(items);
            return trn_fail(TRN_ERR_NOMEM, "async checkpoint: staging %zu bytes: %s", need * sizeof(float), trn_error_reason());
        }
        a->stage_floats = need;
    }
    /* the snapshot: the only part training waits for */
    for (i = 0; i < n; i++) {
        float *dst = a->stage + at;
        const float *src = items[i].src;
        size_t len = items[i].n, chunk = (size_t)1 << 20;
        long long c, nc = (long long)((len + chunk - 1) / chunk);
        if (m->backend->place == TRN_HOST) {
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
            for (c = 0; c < nc; c++) {
                size_t lo = (size_t)c * chunk;
                memcpy(dst + lo, src + lo, TRN__MIN(chunk, len - lo) * sizeof(float));
            }
        } else {
            m->backend->download(dst, src, len * sizeof(float)); /* device -> (pinned) host */
        }
        items[i].src = dst;
        at += len;
    }
    trn_crc32c(0, "", 0); /* build the CRC table here, not racing in the writer */
    j->items = items;
    j->n_items = n;
    j->step = step;
    j->keep = a->keep;
    j->keep_best = a->keep_best;
    j->result = TRN_OK;
    j->reason[0] = 0;
    snprintf(a->path, sizeof a->path, "%s", j->path);
    a->saves++;
    j->running = 1;
    a->in_flight = 1;
    a->stage_seconds = trn__now() - t0;
#ifdef TRN__HAVE_PTHREAD
    if (pthread_create(&j->thread, NULL, trn__ckpt_writer, j) == 0) return TRN_OK;
#endif
    trn__ckpt_writer(j); /* no thread to be had: write it now, synchronously */
    r = trn__ckpt_collect(a);
    a->stage_seconds = trn__now() - t0;
    return r;
}

TRNDEF void trn_ckpt_async_free(trn_ckpt_async *a) {
    if (!a) return;
    if (trn_checkpoint_wait(a) != TRN_OK) fprintf(stderr, "train.h: %s\n", trn_error_reason());
    if (a->stage) { if (a->host_free) a->host_free(a->stage); else trn_free(a->stage); }
    trn_free(a->job);
    a->stage = NULL;
    a->stage_floats = 0;
    a->job = NULL;
}
/* <<run implementation end */

#endif /* TRAIN_RUN_IMPLEMENTATION_DONE */
#endif /* TRAIN_IMPLEMENTATION */
