/* extras/train_loop.h - a companion of train.h: the loop's extras: progress/ETA, CSV, TensorBoard, spike guard, early stopping, the profile table

   Do this:
      #define TRAIN_IMPLEMENTATION
      #include "train.h"
      #include "extras/train_loop.h"
   in the one C or C++ file that implements train.h; every other file
   includes both plainly. This header's implementation comes with train.h's
   (it uses train.h's private helpers: the JSON reader, UTF-8, the ledger),
   so it needs no macro of its own; TRAIN_LOOP_IMPLEMENTATION is accepted
   and must sit in the same file as TRAIN_IMPLEMENTATION.

   Nothing in train.h, train_cuda.h or train_nccl.h calls this file: it is
   a leaf, used by the examples and by your program if you want it. Why a
   companion and not a part of train.h: docs/DESIGN-notes.md.

   Contents (grep for the anchors):
      >>loop        progress/ETA, CSV, TensorBoard, spike guard, early
                    stopping, the profile table

   License: MIT, as train.h.
*/
#ifndef TRAIN_H_INCLUDED
#error "extras/train_loop.h: include train.h first"
#endif
#ifndef TRAIN_LOOP_H_INCLUDED
#define TRAIN_LOOP_H_INCLUDED

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------
   >>loop
   The pieces of a training loop around the step (what Lightning's Trainer
   and its callbacks do), each a struct you own and a few calls:
     trn_progress     the step line with an ETA; on a terminal one line
                      updated in place (step/total, loss, tokens/s, ETA)
     trn_csv          metrics as CSV rows, cut back to the step on resume
     trn_tb_writer    TensorBoard event files (scalars), no TensorFlow
     trn_spike_guard  skip the update of a step whose loss or gradient
                      norm is an outlier (running z-score); resumable
     trn_early_stop   stop after N validations without improvement
     trn_profile_print  the table of train.h's profile (>>profile there):
                      time and bytes per op kind, forward and backward
   Run directories, async checkpoints and keep-best: extras/train_run.h.
   ------------------------------------------------------------------------ */
typedef struct trn_progress {
    long long total;     /* the run's last step                             */
    long long first;     /* the step the clock started at (a resume: > 0)   */
    double t0;           /* when (seconds, monotonic)                       */
    int tty;             /* 1: `out` is a terminal: one line, updated in place */
    int open;            /* an in-place line is on the screen (no newline)  */
    FILE *out;           /* stdout                                          */
    const char *unit;    /* of the rate shown on a terminal: "tok/s"        */
} trn_progress;
/* start the clock at `step` (0, or the step a resume starts from) */
TRNDEF void trn_progress_init(trn_progress *p, long long step, long long total);
/* seconds left after `step`, from the mean time per step so far; -1: unknown */
TRNDEF double trn_progress_eta(const trn_progress *p, long long step);
/* "0:07", "12:05", "3:02:09" (h:mm:ss) into buf */
TRNDEF const char *trn_duration_str(double seconds, char *buf, size_t n);
/* Print step `step`. Not a terminal (logs, CI): `line` (the example's own
   step line, no newline) + " | eta M:SS" + newline, one line per step. A
   terminal: "step 120/600 [#####.....] 20% | loss 2.3456 | 12345 tok/s |
   0:14<0:56" rewritten in place. */
TRNDEF void trn_progress_step(trn_progress *p, long long step, float loss, double tok_per_s, const char *line);
/* call before printing anything else: ends the in-place line, which stays */
TRNDEF void trn_progress_break(trn_progress *p);

/* CSV: a header line, then one row per call; NaN prints as an empty cell
   (a step without validation has no val_loss). resume_step < 0: a new
   file. >= 0: the file's rows with a first column <= resume_step are
   kept (rows a killed run wrote after its checkpoint go) and new rows
   follow; the file's header must be `header`. */
typedef struct trn_csv {
    FILE *f;
    int n_cols;
    char path[1024];
} trn_csv;
/* A stream the run writes to (the CSV; examples/common.h's --log):
   opened for writing ("w") or appending ("a"). A regular file (made if
   missing) or a character device such as /dev/null; a FIFO only while some
   process reads it (nobody reading: an error, never a hang); a directory or
   socket is an error naming the path. NULL with the reason set. */
TRNDEF FILE *trn_open_output(const char *path, const char *mode);
TRNDEF trn_result trn_csv_open(trn_csv *c, const char *path, const char *header, long long resume_step);
TRNDEF trn_result trn_csv_row(trn_csv *c, const double *values); /* n_cols values */
TRNDEF trn_result trn_csv_close(trn_csv *c);

/* TensorBoard: DIR/events.out.tfevents.<time>.<host>.<pid> (TensorBoard
   reads every such file in DIR, so a resumed run adds one). The format:
   TFRecords (length, masked CRC-32C of the length, an Event protobuf,
   masked CRC-32C of it), each Event a wall time, a step and a Summary of
   scalar values, encoded by hand (no protobuf library).
      tensorboard --logdir DIR */
typedef struct trn_tb_writer {
    FILE *f;
    char path[1100];
} trn_tb_writer;
TRNDEF trn_result trn_tb_open(trn_tb_writer *w, const char *dir);
TRNDEF trn_result trn_tb_scalar(trn_tb_writer *w, const char *tag, long long step, double value);
/* "memory/<kind>" (MiB, host) and "memory/device/<kind>" for every kind
   in use, "memory/rss" (the OS's view) */
TRNDEF trn_result trn_tb_memory(trn_tb_writer *w, long long step);
TRNDEF trn_result trn_tb_flush(trn_tb_writer *w);
TRNDEF trn_result trn_tb_close(trn_tb_writer *w);

/* Spike guard (llm.c's outlier detector): the z-score of a step's loss and
   of its gradient norm against the last TRN_SPIKE_WINDOW steps. A step
   whose loss or norm is more than z standard deviations above the mean
   (or not finite) should not update the weights: check returns 1. Finite
   values join the window either way (a lasting change of level is
   learned, not skipped forever); judging starts after TRN_SPIKE_MIN steps.
   The window goes into the checkpoint (exact bits), so a resumed run
   skips the same steps. */
#define TRN_SPIKE_WINDOW 100
#define TRN_SPIKE_MIN 20
typedef struct trn_spike_guard {
    float z;                         /* threshold; <= 0: never skip       */
    int n, pos;                      /* values in the window, next slot   */
    float loss[TRN_SPIKE_WINDOW], norm[TRN_SPIKE_WINDOW];
    long long skipped;               /* updates skipped so far            */
    float z_loss, z_norm;            /* the last step's z-scores          */
} trn_spike_guard;
TRNDEF void trn_spike_guard_init(trn_spike_guard *g, float z);
TRNDEF int trn_spike_guard_check(trn_spike_guard *g, float loss, float grad_norm);
TRNDEF void trn_spike_guard_save(const trn_spike_guard *g, trn_meta *meta);   /* "spike.*" */
TRNDEF trn_result trn_spike_guard_load(trn_spike_guard *g, const trn_meta *meta); /* absent: empty */

/* Early stopping (Lightning's EarlyStopping on val_loss, min_delta 0):
   update returns 1 once `patience` validations in a row did not beat the
   best. Its state goes into the checkpoint ("early.*"). */
typedef struct trn_early_stop {
    int patience;        /* <= 0: never stop                                */
    double best;         /* lowest validation loss so far (HUGE_VAL: none)  */
    long long best_step;
    int bad;             /* validations since the best                      */
} trn_early_stop;
TRNDEF void trn_early_stop_init(trn_early_stop *e, int patience);
TRNDEF int trn_early_stop_update(trn_early_stop *e, long long step, double val_loss);
TRNDEF void trn_early_stop_save(const trn_early_stop *e, trn_meta *meta);
TRNDEF trn_result trn_early_stop_load(trn_early_stop *e, const trn_meta *meta);

/* the profile's table (train.h's >>profile: trn_profile_attach), one row
   per op kind sorted by total time: calls, ms and arena MiB per backward
   pass, forward and backward, and each one's share of the time */
TRNDEF void trn_profile_print(const trn_profile *p, FILE *f);
/* <<loop declarations end */

#ifdef __cplusplus
}
#endif
#endif /* TRAIN_LOOP_H_INCLUDED */

#if defined(TRAIN_LOOP_IMPLEMENTATION) && !defined(TRAIN_IMPLEMENTATION)
#error "extras/train_loop.h: TRAIN_LOOP_IMPLEMENTATION needs TRAIN_IMPLEMENTATION in the same file (define it before train.h)"
#endif
#ifdef TRAIN_IMPLEMENTATION
#ifndef TRAIN_IMPLEMENTATION_DONE
#error "extras/train_loop.h: train.h's implementation is not in this file (define TRAIN_IMPLEMENTATION before the first #include \"train.h\")"
#endif
#ifndef TRAIN_LOOP_IMPLEMENTATION_DONE
#define TRAIN_LOOP_IMPLEMENTATION_DONE

/* >>loop implementation */
/* ========================================================================
   >>loop
   ======================================================================== */
/* --- progress ---------------------------------------------------------------- */
TRNDEF void trn_progress_init(trn_progress *p, long long step, long long total) {
    if (!p) trn_fatal("trn_progress_init: NULL");
    memset(p, 0, sizeof *p);
    p->first = step;
    p->total = total;
    p->t0 = trn__now();
    p->out = stdout;
    p->unit = "tok/s";
#if defined(__unix__) || defined(__APPLE__)
    p->tty = isatty(fileno(stdout));
#endif
}

TRNDEF double trn_progress_eta(const trn_progress *p, long long step) {
    double per;
    if (!p || step <= p->first) return -1.0;
    per = (trn__now() - p->t0) / (double)(step - p->first);
    return per * (double)(p->total > step ? p->total - step : 0);
}

TRNDEF const char *trn_duration_str(double seconds, char *buf, size_t n) {
    long long s;
    if (!(seconds >= 0) || seconds > 3.6e9) { snprintf(buf, n, "?"); return buf; }
    s = (long long)(seconds + 0.5);
    if (s >= 3600) snprintf(buf, n, "%lld:%02lld:%02lld", s / 3600, s / 60 % 60, s % 60);
    else snprintf(buf, n, "%lld:%02lld", s / 60, s % 60);
    return buf;
}

TRNDEF void trn_progress_step(trn_progress *p, long long step, float loss, double tok_per_s, const char *line) {
    char eta[32], el[32], bar[21];
    double left = trn_progress_eta(p, step);
    trn_duration_str(left, eta, sizeof eta);
    if (!p->tty) {
        fprintf(p->out, "%s | eta %s\n", line ? line : "", eta);
        fflush(p->out);
        return;
    }
    {
        double frac = p->total > 0 ? (double)step / (double)p->total : 1.0;
        int i, fill = (int)(frac * 20.0);
        for (i = 0; i < 20; i++) bar[i] = i < fill ? '#' : '.';
        bar[20] = 0;
        trn_duration_str(trn__now() - p->t0, el, sizeof el);
        /* \r: back to the line's start; \033[K: clear what a longer line left */
        fprintf(p->out, "\rstep %lld/%lld [%s] %3.0f%% | loss %.4f | %.0f %s | %s<%s\033[K", step, p->total, bar,
                100.0 * frac, (double)loss, tok_per_s, p->unit ? p->unit : "", el, eta);
        fflush(p->out);
        p->open = 1;
    }
}

TRNDEF void trn_progress_break(trn_progress *p) {
    if (p && p->open) { fputc('\n', p->out); p->open = 0; }
}

/* --- output streams ---------------------------------------------------------- */
TRNDEF FILE *trn_open_output(const char *path, const char *mode) {
    struct stat st;
    int fd, e, flags;
    FILE *f;
    if (!path || !mode || (strcmp(mode, "w") != 0 && strcmp(mode, "a") != 0)) {
        trn_fail(TRN_ERR_INVALID, "trn_open_output: NULL path or a mode other than \"w\", \"a\"");
        return NULL;
    }
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode) && !S_ISCHR(st.st_mode) && !S_ISFIFO(st.st_mode)) {
        trn_fail(TRN_ERR_IO, "%s: %s, not a file to write to", path, S_ISDIR(st.st_mode) ? "a directory" : "a socket or block device");
        return NULL;
    }
    /* O_NONBLOCK: open() of a FIFO nobody reads fails (ENXIO) instead of
       waiting for a reader forever; the writes after it block as usual */
    fd = open(path, O_WRONLY | O_CREAT | O_NONBLOCK | (mode[0] == 'a' ? O_APPEND : O_TRUNC), 0666);
    if (fd < 0) {
        e = errno;
        trn_fail(TRN_ERR_IO, "%s: %s", path, e == ENXIO ? "a FIFO that no process reads" : strerror(e));
        return NULL;
    }
    if ((flags = fcntl(fd, F_GETFL)) < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) < 0 || !(f = fdopen(fd, mode))) {
        trn_fail(TRN_ERR_IO, "%s: %s", path, strerror(errno));
        close(fd);
        return NULL;
    }
    return f;
}

/* --- CSV ------------------------------------------------------------------- */
TRNDEF trn_result trn_csv_open(trn_csv *c, const char *path, const char *header, long long resume_step) {
    const char *h;
    if (!c || !path || !header || !*header) return trn_fail(TRN_ERR_INVALID, "trn_csv_open: NULL argument");
    memset(c, 0, sizeof *c);
    if ((size_t)snprintf(c->path, sizeof c->path, "%s", path) >= sizeof c->path) return trn_fail(TRN_ERR_INVALID, "%s: path too long", path);
    c->n_cols = 1;
    for (h = header; *h; h++) c->n_cols += *h == ',';
    if (resume_step >= 0) {
        FILE *in = trn_check_regular(path) == TRN_OK ? fopen(path, "r") : NULL; /* (a FIFO would block fopen) */
        if (in) { /* keep the header and the rows up to resume_step, through a temp file */
            char line[4096], tmp[1100];
            FILE *out;
            int first = 1;
            snprintf(tmp, sizeof tmp, "%s.tmp", path);
            if (!(out = fopen(tmp, "w"))) {
                fclose(in);
                return trn_fail(TRN_ERR_IO, "%s: %s", tmp, strerror(errno));
            }
            while (fgets(line, sizeof line, in)) {
                size_t len = strlen(line);
                if (len && line[len - 1] == '\n') line[--len] = 0;
                if (first) {
                    first = 0;
                    if (strcmp(line, header) != 0) {
                        fclose(in); fclose(out); remove(tmp);
                        return trn_fail(TRN_ERR_MISMATCH, "%s: its header is not \"%s\"", path, header);
                    }
                } else if (strtoll(line, NULL, 10) > resume_step) {
                    continue; /* written after the checkpoint we resume from */
                }
                fprintf(out, "%s\n", line);
            }
            fclose(in);
            if (first) fprintf(out, "%s\n", header); /* it was empty */
            if (fclose(out) != 0 || rename(tmp, path) != 0) return trn_fail(TRN_ERR_IO, "%s: %s", path, strerror(errno));
            return (c->f = trn_open_output(path, "a")) ? TRN_OK : TRN_ERR_IO;
        }
    }
    if (!(c->f = trn_open_output(path, "w"))) return TRN_ERR_IO;
    fprintf(c->f, "%s\n", header);
    return TRN_OK;
}

TRNDEF trn_result trn_csv_row(trn_csv *c, const double *v) {
    int i;
    if (!c || !c->f || !v) return trn_fail(TRN_ERR_INVALID, "trn_csv_row: not open");
    for (i = 0; i < c->n_cols; i++) {
        if (i) fputc(',', c->f);
        if (v[i] != v[i]) continue; /* NaN: an empty cell */
        if (v[i] == floor(v[i]) && fabs(v[i]) < 1e15) fprintf(c->f, "%.0f", v[i]);
        else fprintf(c->f, "%.9g", v[i]);
    }
    fputc('\n', c->f);
    if (fflush(c->f) != 0) return trn_fail(TRN_ERR_IO, "%s: %s", c->path, strerror(errno));
    return TRN_OK;
}

TRNDEF trn_result trn_csv_close(trn_csv *c) {
    int bad;
    if (!c || !c->f) return TRN_OK;
    bad = fclose(c->f) != 0;
    c->f = NULL;
    return bad ? trn_fail(TRN_ERR_IO, "%s: %s", c->path, strerror(errno)) : TRN_OK;
}

/* --- TensorBoard ------------------------------------------------------------ */
/* protobuf wire format: a key is (field << 3 | wire type); varints carry 7
   bits per byte, low bits first; type 1 = 8 bytes, 2 = length + bytes,
   5 = 4 bytes, all little-endian */
static size_t trn__pb_varint(unsigned char *o, uint64_t v) {
    size_t n = 0;
    while (v >= 0x80) { o[n++] = (unsigned char)(v | 0x80); v >>= 7; }
    o[n++] = (unsigned char)v;
    return n;
}
static size_t trn__pb_bytes(unsigned char *o, int field, const void *p, size_t len) {
    size_t n = trn__pb_varint(o, (uint64_t)(field << 3 | 2));
    n += trn__pb_varint(o + n, len);
    memcpy(o + n, p, len);
    return n + len;
}

/* TFRecord's checksum: CRC-32C, rotated right by 15 and offset, so that a
   CRC of data holding CRCs stays well distributed */
static uint32_t trn__tb_masked_crc(const void *p, size_t n) {
    uint32_t c = trn_crc32c(0, p, n);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

static trn_result trn__tb_record(trn_tb_writer *w, const unsigned char *data, size_t n) {
    unsigned char head[12], tail[4];
    uint32_t c;
    int i;
    for (i = 0; i < 8; i++) head[i] = (unsigned char)((uint64_t)n >> (8 * i));
    c = trn__tb_masked_crc(head, 8);
    for (i = 0; i < 4; i++) head[8 + i] = (unsigned char)(c >> (8 * i));
    c = trn__tb_masked_crc(data, n);
    for (i = 0; i < 4; i++) tail[i] = (unsigned char)(c >> (8 * i));
    if (fwrite(head, 1, 12, w->f) != 12 || fwrite(data, 1, n, w->f) != n || fwrite(tail, 1, 4, w->f) != 4)
        return trn_fail(TRN_ERR_IO, "write %s: %s", w->path, strerror(errno));
    return TRN_OK;
}

/* Event { double wall_time = 1; int64 step = 2; oneof { string file_version = 3; Summary summary = 5; } }
   Summary { repeated Value value = 1; }  Value { string tag = 1; float simple_value = 2; } */
static trn_result trn__tb_event(trn_tb_writer *w, long long step, const char *tag, double value, const char *version) {
    unsigned char ev[600], val[300], sum[320];
    size_t n = 0, nv = 0, ns, tl;
    struct timespec ts;
    double wall;
    float f = (float)value;
    clock_gettime(CLOCK_REALTIME, &ts);
    wall = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
    ev[n++] = 1 << 3 | 1;
    memcpy(ev + n, &wall, 8); n += 8; /* little-endian hosts (as the checkpoints) */
    n += trn__pb_varint(ev + n, 2 << 3 | 0);
    n += trn__pb_varint(ev + n, (uint64_t)step);
    if (version) {
        n += trn__pb_bytes(ev + n, 3, version, strlen(version));
    } else {
        tl = strlen(tag);
        if (tl > 200) return trn_fail(TRN_ERR_INVALID, "tensorboard: tag '%.40s...' is too long", tag);
        nv += trn__pb_bytes(val + nv, 1, tag, tl);
        val[nv++] = 2 << 3 | 5;
        memcpy(val + nv, &f, 4); nv += 4;
        ns = trn__pb_bytes(sum, 1, val, nv);
        n += trn__pb_bytes(ev + n, 5, sum, ns);
    }
    return trn__tb_record(w, ev, n);
}

TRNDEF trn_result trn_tb_open(trn_tb_writer *w, const char *dir) {
    char host[128] = "localhost";
    struct timespec ts;
    trn_result r;
    if (!w || !dir) return trn_fail(TRN_ERR_INVALID, "trn_tb_open: NULL argument");
    memset(w, 0, sizeof *w);
    if ((r = trn_mkdirs(dir)) != TRN_OK) return r;
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = 0;
    clock_gettime(CLOCK_REALTIME, &ts);
    if ((size_t)snprintf(w->path, sizeof w->path, "%s/events.out.tfevents.%lld.%s.%ld", dir, (long long)ts.tv_sec, host,
                         (long)getpid()) >= sizeof w->path)
        return trn_fail(TRN_ERR_INVALID, "%s: path too long", dir);
    if (!(w->f = fopen(w->path, "wb"))) return trn_fail(TRN_ERR_IO, "%s: %s", w->path, strerror(errno));
    if ((r = trn__tb_event(w, 0, NULL, 0, "brain.Event:2")) != TRN_OK) return r; /* the file's first record */
    return trn_tb_flush(w);
}

TRNDEF trn_result trn_tb_scalar(trn_tb_writer *w, const char *tag, long long step, double value) {
    if (!w || !w->f || !tag) return trn_fail(TRN_ERR_INVALID, "trn_tb_scalar: not open or no tag");
    return trn__tb_event(w, step, tag, value, NULL);
}

TRNDEF trn_result trn_tb_memory(trn_tb_writer *w, long long step) {
    trn_ledger_snapshot s;
    char tag[96];
    trn_result r = TRN_OK;
    int k;
    trn_ledger_read(&s);
    for (k = 0; k < TRN_KIND_COUNT && r == TRN_OK; k++) {
        if (s.peak[TRN_HOST][k]) {
            snprintf(tag, sizeof tag, "memory/%s", trn_kind_name((trn_kind)k));
            r = trn_tb_scalar(w, tag, step, (double)s.current[TRN_HOST][k] / 1048576.0);
        }
        if (r == TRN_OK && s.peak[TRN_DEVICE][k]) {
            snprintf(tag, sizeof tag, "memory/device/%s", trn_kind_name((trn_kind)k));
            r = trn_tb_scalar(w, tag, step, (double)s.current[TRN_DEVICE][k] / 1048576.0);
        }
    }
    if (r == TRN_OK && s.rss) r = trn_tb_scalar(w, "memory/rss", step, (double)s.rss / 1048576.0);
    return r;
}

TRNDEF trn_result trn_tb_flush(trn_tb_writer *w) {
    if (!w || !w->f) return TRN_OK;
    if (fflush(w->f) != 0) return trn_fail(TRN_ERR_IO, "write %s: %s", w->path, strerror(errno));
    return TRN_OK;
}

TRNDEF trn_result trn_tb_close(trn_tb_writer *w) {
    int bad;
    if (!w || !w->f) return TRN_OK;
    bad = fclose(w->f) != 0;
    w->f = NULL;
    return bad ? trn_fail(TRN_ERR_IO, "close %s: %s", w->path, strerror(errno)) : TRN_OK;
}

/* --- spike guard ------------------------------------------------------------ */
TRNDEF void trn_spike_guard_init(trn_spike_guard *g, float z) {
    if (!g) trn_fatal("trn_spike_guard_init: NULL");
    memset(g, 0, sizeof *g);
    g->z = z;
}

/* (x - mean) / std over the window; 0 while the window is too short or flat.
   Recomputed from the values each step (no running sums), so that a window
   restored from a checkpoint gives the same bits. */
static float trn__zscore(const float *w, int n, float x) {
    double mean = 0, var = 0;
    int i;
    if (n < TRN_SPIKE_MIN) return 0.0f;
    for (i = 0; i < n; i++) mean += w[i];
    mean /= n;
    for (i = 0; i < n; i++) var += (w[i] - mean) * (w[i] - mean);
    var /= n;
    return var > 0 ? (float)((x - mean) / sqrt(var)) : 0.0f;
}

TRNDEF int trn_spike_guard_check(trn_spike_guard *g, float loss, float norm) {
    int finite = isfinite(loss) && isfinite(norm), spike;
    if (!g) trn_fatal("trn_spike_guard_check: NULL");
    g->z_loss = finite ? trn__zscore(g->loss, g->n, loss) : INFINITY;
    g->z_norm = finite ? trn__zscore(g->norm, g->n, norm) : INFINITY;
    spike = !finite || g->z_loss > g->z || g->z_norm > g->z;
    if (finite) {
        g->loss[g->pos] = loss;
        g->norm[g->pos] = norm;
        g->pos = (g->pos + 1) % TRN_SPIKE_WINDOW;
        if (g->n < TRN_SPIKE_WINDOW) g->n++;
    }
    if (spike && g->z > 0) g->skipped++;
    return g->z > 0 && spike;
}

/* the floats as 8 hex digits each: exact, and 100 of them fit a meta value */
static void trn__hex_floats(char *out, const float *v, int n) {
    int i;
    for (i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &v[i], 4);
        sprintf(out + 8 * i, "%08x", (unsigned)u);
    }
    out[8 * n] = 0;
}
static int trn__unhex_floats(float *v, const char *s, int n) {
    int i, k;
    if ((int)strlen(s) != 8 * n) return 0;
    for (i = 0; i < n; i++) {
        uint32_t u = 0;
        for (k = 0; k < 8; k++) {
            char c = s[8 * i + k];
            int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
            if (d < 0) return 0;
            u = u << 4 | (uint32_t)d;
        }
        memcpy(&v[i], &u, 4);
    }
    return 1;
}

TRNDEF void trn_spike_guard_save(const trn_spike_guard *g, trn_meta *meta) {
    char buf[8 * TRN_SPIKE_WINDOW + 1];
    trn_meta_set_u64(meta, "spike.n", (uint64_t)g->n);
    trn_meta_set_u64(meta, "spike.pos", (uint64_t)g->pos);
    trn_meta_set_u64(meta, "spike.skipped", (uint64_t)g->skipped);
    trn__hex_floats(buf, g->loss, g->n);
    trn_meta_set(meta, "spike.loss", buf);
    trn__hex_floats(buf, g->norm, g->n);
    trn_meta_set(meta, "spike.norm", buf);
}

TRNDEF trn_result trn_spike_guard_load(trn_spike_guard *g, const trn_meta *meta) {
    uint64_t n, pos, sk;
    const char *l, *nm;
    float z = g->z;
    trn_spike_guard_init(g, z);
    if (trn_meta_get_u64(meta, "spike.n", &n) != TRN_OK) return TRN_OK; /* saved without a guard */
    l = trn_meta_get(meta, "spike.loss");
    nm = trn_meta_get(meta, "spike.norm");
    if (n > TRN_SPIKE_WINDOW || trn_meta_get_u64(meta, "spike.pos", &pos) != TRN_OK || pos >= TRN_SPIKE_WINDOW ||
        trn_meta_get_u64(meta, "spike.skipped", &sk) != TRN_OK || !l || !nm ||
        !trn__unhex_floats(g->loss, l, (int)n) || !trn__unhex_floats(g->norm, nm, (int)n))
        return trn_fail(TRN_ERR_FORMAT, "spike guard: the checkpoint's spike.* values are malformed");
    g->n = (int)n;
    g->pos = (int)pos;
    g->skipped = (long long)sk;
    return TRN_OK;
}

/* --- early stopping ----------------------------------------------------------- */
TRNDEF void trn_early_stop_init(trn_early_stop *e, int patience) {
    if (!e) trn_fatal("trn_early_stop_init: NULL");
    e->patience = patience;
    e->best = HUGE_VAL;
    e->best_step = -1;
    e->bad = 0;
}

TRNDEF int trn_early_stop_update(trn_early_stop *e, long long step, double val) {
    if (val < e->best) { e->best = val; e->best_step = step; e->bad = 0; }
    else e->bad++;
    return e->patience > 0 && e->bad >= e->patience;
}

TRNDEF void trn_early_stop_save(const trn_early_stop *e, trn_meta *meta) {
    if (e->best_step < 0) return;
    trn_meta_set_f64(meta, "early.best", e->best);
    trn_meta_set_u64(meta, "early.best_step", (uint64_t)e->best_step);
    trn_meta_set_u64(meta, "early.bad", (uint64_t)e->bad);
}

TRNDEF trn_result trn_early_stop_load(trn_early_stop *e, const trn_meta *meta) {
    uint64_t s, b;
    double best;
    trn_early_stop_init(e, e->patience);
    if (!trn_meta_get(meta, "early.best")) return TRN_OK;
    if (trn_meta_get_f64(meta, "early.best", &best) != TRN_OK || trn_meta_get_u64(meta, "early.best_step", &s) != TRN_OK ||
        trn_meta_get_u64(meta, "early.bad", &b) != TRN_OK)
        return trn_fail(TRN_ERR_FORMAT, "early stopping: the checkpoint's early.* values are malformed");
    e->best = best;
    e->best_step = (long long)s;
    e->bad = (int)b;
    return TRN_OK;
}

static int trn__prof_cmp(const void *a, const void *b) {
    const trn_profile_row *x = (const trn_profile_row *)a, *y = (const trn_profile_row *)b;
    double tx = x->ms[0] + x->ms[1], ty = y->ms[0] + y->ms[1];
    return tx < ty ? 1 : tx > ty ? -1 : 0;
}

TRNDEF void trn_profile_print(const trn_profile *p, FILE *f) {
    trn_profile_row rows[TRN_PROFILE_MAX_OPS];
    double tot[2] = {0, 0}, all, bytes[2] = {0, 0};
    int i, n;
    if (!p || !f) return;
    n = p->n_rows;
    memcpy(rows, p->rows, sizeof(trn_profile_row) * (size_t)n);
    qsort(rows, (size_t)n, sizeof rows[0], trn__prof_cmp);
    for (i = 0; i < n; i++) { tot[0] += rows[i].ms[0]; tot[1] += rows[i].ms[1]; bytes[0] += rows[i].bytes[0]; bytes[1] += rows[i].bytes[1]; }
    all = tot[0] + tot[1] > 0 ? tot[0] + tot[1] : 1;
    fprintf(f, "-- profile: %lld backward passes, %s; time per op kind (ms per pass, share of the total), "
               "arena bytes per pass --\n", p->passes, p->clock_name ? p->clock_name : "host clock");
    fprintf(f, "  %-16s %7s %10s %6s %10s | %7s %10s %6s %10s\n", "op", "fwd n", "fwd ms", "%", "fwd MiB", "bwd n",
            "bwd ms", "%", "bwd MiB");
#define TRN__PP(x) ((x) / (double)(p->passes ? p->passes : 1))
    for (i = 0; i < n; i++)
        fprintf(f, "  %-16s %7.0f %10.3f %5.1f%% %10.2f | %7.0f %10.3f %5.1f%% %10.2f\n", rows[i].op,
                TRN__PP((double)rows[i].calls[0]), TRN__PP(rows[i].ms[0]), 100 * rows[i].ms[0] / all,
                TRN__PP(rows[i].bytes[0]) / 1048576.0, TRN__PP((double)rows[i].calls[1]), TRN__PP(rows[i].ms[1]),
                100 * rows[i].ms[1] / all, TRN__PP(rows[i].bytes[1]) / 1048576.0);
    fprintf(f, "  %-16s %7s %10.3f %5.1f%% %10.2f | %7s %10.3f %5.1f%% %10.2f\n", "total", "", TRN__PP(tot[0]),
            100 * tot[0] / all, TRN__PP(bytes[0]) / 1048576.0, "", TRN__PP(tot[1]), 100 * tot[1] / all,
            TRN__PP(bytes[1]) / 1048576.0);
#undef TRN__PP
}

/* <<loop implementation end */

#endif /* TRAIN_LOOP_IMPLEMENTATION_DONE */
#endif /* TRAIN_IMPLEMENTATION */
