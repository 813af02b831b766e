// examples/common.h - what the training programs share: errors and flags,
// the kit's own text as data, validation/sampling helpers, the JSONL log,
// the loss plot, the run state a checkpoint carries, and the loop's extras
// (progress and ETA, CSV, TensorBoard, async and best checkpoints, early
// stopping, --max-time, the spike guard, the profile). examples/gpt2.c
// and examples/llama.c include it after train.h; each keeps its model,
// its --init loader and its main().
//
// Define EX_PROG (the program's name, for messages) before including.
#ifndef EXAMPLES_COMMON_H
#define EXAMPLES_COMMON_H
#ifndef EX_PROG
#error "define EX_PROG (the program's name) before including examples/common.h"
#endif

#include <ctype.h>
#include <errno.h>
#include <glob.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#ifdef __GLIBC__
#include <malloc.h> // mallopt
#endif

// ===========================================================================
// >>errors: bad input exits 2 with one line, a failed kit call exits 1
// ===========================================================================

// glibc gives a large freed block back to the OS only while its mmap
// threshold is low, and it raises the threshold after the first large free:
// later blocks then stay on its heap, and the OS's RSS runs ahead of the
// ledger (by 0.5 GiB for GPT-2 124M at B=2, T=1024). A fixed threshold
// keeps every large block an mmap, returned when freed. Called first in main.
static void malloc_return_large_blocks(void) {
#ifdef __GLIBC__
    mallopt(M_MMAP_THRESHOLD, 128 * 1024);
#endif
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// Bad input (flags, files): one line on stderr, exit code 2.
static void die(const char *fmt, ...) {
    va_list ap;
    fflush(stdout);
    fputs(EX_PROG ": ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(2);
}

// A kit call that failed for reasons outside our control (disk full, out
// of memory): its reason, and exit code 1.
#define CHECK_OK(call)                                                                            \
    do {                                                                                          \
        trn_result check_r_ = (call);                                                             \
        if (check_r_ != TRN_OK) {                                                                 \
            fprintf(stderr, EX_PROG ": %s:%d: %s failed: %s (%s)\n", __FILE__, __LINE__, #call,       \
                    trn_error_reason(), trn_result_string(check_r_));                             \
            exit(1);                                                                              \
        }                                                                                         \
    } while (0)


// a number from a safetensors header's __metadata__, or -1
static long st_meta_long(const trn_safetensors *f, const char *key) {
    const char *v = trn_safetensors_meta(f, key);
    char *end;
    long x;
    if (!v) return -1;
    errno = 0;
    x = strtol(v, &end, 10);
    return (errno || *end || end == v || x < 0 || x > 100000000) ? -1 : x;
}

// ---------------------------------------------------------------------------
// --init is strict: every value of every tensor read is finite, and every
// tensor of the file is one the model reads (a q_proj.bias, a layer the
// config does not have, a gap in the layer numbers: an error naming it,
// never a model that silently differs from the file). --init-lenient
// relaxes both checks (the shapes and the config are always checked).
static int init_lenient; // set by --init-lenient (parse_args)

// NaN or inf in n floats of tensor `name` -> an error naming it
static trn_result init_check_finite(const char *path, const char *name, const float *v, size_t n) {
    if (init_lenient) return TRN_OK;
    for (size_t i = 0; i < n; i++)
        if (!isfinite(v[i]))
            return trn_fail(TRN_ERR_FORMAT, "%s: tensor %s holds %s at element %zu (--init-lenient loads it anyway)",
                            path, name, isnan(v[i]) ? "NaN" : "inf", i);
    return TRN_OK;
}

// every tensor of f read (used[i] set for f->tensors[i]), except those
// `ignorable` names (buffers some exports carry: GPT-2's attn.bias mask,
// rotary_emb.inv_freq); else an error naming the first one left over
static trn_result init_check_unused(const trn_safetensors *f, const unsigned char *used, int (*ignorable)(const char *)) {
    if (init_lenient) return TRN_OK;
    for (int i = 0; i < f->n_tensors; i++)
        if (!used[i] && strncmp(f->tensors[i].name, "optim.", 6) != 0 && // a checkpoint's optimizer state: --init takes the weights
            !(ignorable && ignorable(f->tensors[i].name)))
            return trn_fail(TRN_ERR_MISMATCH, "%s: tensor %s is not part of this model (--init-lenient ignores it)",
                            f->path, f->tensors[i].name);
    return TRN_OK;
}

// GPT-2 pads 50257 to 50304 = 393 * 128; a byte vocabulary stays 256
static int pad_vocab(int V) {
    if (V > INT_MAX - 127) die("a vocabulary of %d tokens: too large to pad to a multiple of 128", V);
    return V <= 256 ? V : (V + 127) / 128 * 128;
}

// ===========================================================================
// >>data: text or token shards -> one array of token ids
// ===========================================================================

// The kit's own text, found next to the program, not in the current
// folder: the program's folder or the one above it (examples/gpt2 -> .),
// from /proc/self/exe (argv[0] where there is no /proc), so the default
// run works from any directory. README, every example, test,
// bench and tool source, the headers, train.h last. The loader validates
// on the last 10% of the tokens, so validation is the end of train.h:
// text like most of the training data (with tools/ or tests/ last, the
// validation loss would mostly measure how different those files are).
// Returns the number of files.
static int kit_corpus_files(const char *argv0, char ***paths_out) {
    static const char *patterns[] = {"README.md", "build.sh", "examples/*.c", "examples/*.cu", "examples/*.h",
                                     "tests/*.c", "tests/*.cpp", "tests/*.h", "tests/*.sh", "bench/*.c", "tools/*.c",
                                     "train_cuda.h", "train_nccl.h", "train.h"};
    char exe[1024], root[1100], probe[1200];
    struct stat st;
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len > 0) exe[len] = 0;
    else snprintf(exe, sizeof exe, "%s", strchr(argv0, '/') ? argv0 : "./");
    *strrchr(exe, '/') = 0; // the program's folder ("" for a program in /)
    snprintf(root, sizeof root, "%s", exe);
    snprintf(probe, sizeof probe, "%s/train.h", root);
    if (stat(probe, &st) != 0) snprintf(root, sizeof root, "%s/..", exe);
    snprintf(probe, sizeof probe, "%s/train.h", root);
    if (stat(probe, &st) != 0) { *paths_out = NULL; return 0; }
    char **paths = NULL;
    int n = 0, cap = 0;
    for (size_t i = 0; i < sizeof patterns / sizeof patterns[0]; i++) {
        char pat[1200];
        glob_t gl;
        snprintf(pat, sizeof pat, "%s/%s", root, patterns[i]);
        if (glob(pat, 0, NULL, &gl) != 0) continue; // sorted, so the corpus is deterministic
        for (size_t k = 0; k < gl.gl_pathc; k++) {
            if (n == cap) {
                cap = cap ? 2 * cap : 64;
                char **np = (char **)realloc(paths, sizeof(char *) * (size_t)cap);
                if (!np) { globfree(&gl); break; }
                paths = np;
            }
            paths[n] = (char *)malloc(strlen(gl.gl_pathv[k]) + 1);
            if (paths[n]) strcpy(paths[n], gl.gl_pathv[k]), n++;
        }
        globfree(&gl);
    }
    *paths_out = paths;
    return n;
}

// Tokens of the run: --data FILE (text, tokenized; or an llm.c shard,
// read as is) or the kit's own files. Every bad case exits with code 2.
// A tokenizer.json's text is one document: its BOS first when the file's
// post-processor has one, as tokenizer(text) gives in Python (special
// tokens written in the text are matched, as there).
static int is_shard_file(const char *path) {
    size_t n = strlen(path);
    int magic = 0;
    FILE *f = n >= 4 && strcmp(path + n - 4, ".bin") == 0 ? NULL : fopen(path, "rb");
    if (!f) return n >= 4 && strcmp(path + n - 4, ".bin") == 0;
    int got = fread(&magic, 4, 1, f) == 1;
    fclose(f);
    return got && (magic == TRN_TOKEN_SHARD_MAGIC || magic == TRN_TOKEN_SHARD_MAGIC32);
}

static void load_tokens(trn_tokens *tokens, const char *data, const trn_tokenizer *tok, const char *argv0) {
    memset(tokens, 0, sizeof *tokens);
    if (data) {
        struct stat st;
        if (stat(data, &st) != 0) die("--data %s: %s", data, strerror(errno));
        if (S_ISDIR(st.st_mode)) die("--data %s: is a directory (give a text file or a .bin shard)", data);
        if (trn_check_regular(data) != TRN_OK) die("--data %s", trn_error_reason()); // a FIFO, a device
        if (st.st_size == 0) die("--data %s: the file is empty", data);
        if (tok->kind == TRN_TOKENIZER_HF && tok->bos_id >= 0 && !is_shard_file(data) &&
            trn_tokens_append(tokens, &tok->bos_id, 1) != TRN_OK)
            die("--data %s: out of memory", data);
        trn_result r = trn_tokens_load(tokens, data, tok);
        if (r != TRN_OK) die("--data %s: %s", data, trn_error_reason());
        return;
    }
    char **paths = NULL;
    int n = kit_corpus_files(argv0, &paths);
    char *text = NULL;
    size_t len = 0;
    if (n == 0 || trn_text_read_files(&text, &len, (const char *const *)paths, n, 1) != TRN_OK || len == 0)
        die("no --data given and the kit's own text files (train.h, examples/*.c, ...) were not found "
            "next to the program or in the folder above it: pass --data FILE");
    printf("data: the kit's own text, %d files, %zu bytes\n", n, len);
    for (int i = 0; i < n; i++) free(paths[i]);
    free(paths);
    trn_result r = trn_tokenizer_encode_ex(tok, text, len, TRN_ENCODE_BOS, tokens);
    trn_free(text);
    if (r != TRN_OK) die("tokenizing the kit's text: %s", trn_error_reason());
}

// The tokenizer: bytes, GPT-2 BPE from --bpe DIR, or a Hugging Face
// tokenizer.json from --tokenizer FILE. Its vocabulary must fit the
// model's (*V, padded *Vp); a fresh model (fresh: no checkpoint, no
// --init) takes the tokenizer's size instead.
static void load_tokenizer(trn_tokenizer *tok, const char *bpe, const char *file, int fresh, int *V, int *Vp) {
    const char *flag = file ? "--tokenizer" : "--bpe", *path = file ? file : bpe;
    if (bpe && file) die("--bpe and --tokenizer: give one tokenizer");
    if (!path) { trn_tokenizer_init_bytes(tok); return; }
    if ((file ? trn_tokenizer_load(tok, file) : trn_tokenizer_load_bpe_dir(tok, bpe)) != TRN_OK)
        die("%s %s: %s", flag, path, trn_error_reason());
    if (fresh && *V != tok->vocab_size) {
        *V = tok->vocab_size;
        *Vp = pad_vocab(tok->vocab_size);
    }
    if (tok->vocab_size > *V) die("%s %s: %d tokens, but the model predicts only %d", flag, path, tok->vocab_size, *V);
}

// --tokenizer's default: tokenizer.json beside --init (in its directory,
// or beside its model.safetensors), where Hugging Face keeps it
static const char *tokenizer_beside(const char *init) {
    static char path[4200];
    struct stat st;
    if (!init || stat(init, &st) != 0) return NULL;
    if (S_ISDIR(st.st_mode)) snprintf(path, sizeof path, "%s/tokenizer.json", init);
    else {
        const char *slash = strrchr(init, '/');
        snprintf(path, sizeof path, "%.*stokenizer.json", slash ? (int)(slash - init + 1) : 0, init);
    }
    return stat(path, &st) == 0 && S_ISREG(st.st_mode) ? path : NULL;
}

// ===========================================================================
// >>train helpers: sampling, the loss history, the log, the plot
// ===========================================================================

// Sample n tokens after the prompt: take the logits of the last position,
// keep the top_k, and draw from softmax(logits / temperature) with the
// kit's RNG. forward(model, ids, B, T) returns the logits (B,T,Vp) of the
// model's first V classes; m is the model's trn_model.
// With a key/value cache (kv, and cached(model, kv, ids, B, T) returning
// the logits (B,1,Vp) of the last of T new positions: train.h's >>kvcache)
// the prompt runs once and each new token is a forward of ONE position;
// when the cache is full (absolute positions cannot slide) it restarts from
// the last half of the window. Without one (kv NULL: the reference that
// tests and bench/gpt2_generate compare with), every token recomputes the
// whole last `window` tokens.
// idx[0..V) = the ids ordered by logit, largest first (ties: smaller id
// first), by a sort of (logit, id) pairs
typedef struct logit_id { float logit; int id; } logit_id;
static int logit_id_desc(const void *a, const void *b) {
    const logit_id *x = (const logit_id *)a, *y = (const logit_id *)b;
    if (x->logit != y->logit) return x->logit > y->logit ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}
static void top_pairs(int *idx, const float *logits, int V) {
    logit_id *p = (logit_id *)malloc(sizeof *p * (size_t)V);
    if (!p) trn_fatal("sample: out of memory");
    for (int v = 0; v < V; v++) p[v].logit = logits[v], p[v].id = v;
    qsort(p, (size_t)V, sizeof *p, logit_id_desc);
    for (int v = 0; v < V; v++) idx[v] = p[v].id;
    free(p);
}
typedef trn_tensor *(*logits_fn)(void *model, const int *ids, int B, int T);
typedef trn_tensor *(*cached_logits_fn)(void *model, trn_kv_cache *kv, const int *ids, int B, int T);
static void sample_text(trn_model *m, logits_fn forward, void *model, int V, int Vp, const trn_tokenizer *tok,
                        const int *prompt, int n_prompt, int n, int window, float temperature, int top_k,
                        trn_rng *rng, cached_logits_fn cached, trn_kv_cache *kv) {
    int fed = 0; // with a cache: ctx[0..fed) went into it
    int *ctx = (int *)malloc(sizeof(int) * (size_t)(n_prompt + n));
    float *logits = (float *)malloc(sizeof(float) * (size_t)Vp);
    int *idx = (int *)malloc(sizeof(int) * (size_t)V);
    char text[256];
    if (!ctx || !logits || !idx) trn_fatal("sample: out of memory");
    memcpy(ctx, prompt, sizeof(int) * (size_t)n_prompt);
    if (top_k <= 0 || top_k > V) top_k = V;
    int grad_was = trn_no_grad(m); // no tape, and evaluation mode (no dropout)
    trn_eval(m);
    size_t len = trn_tokenizer_decode(tok, ctx, (size_t)n_prompt, text, sizeof text);
    fwrite(text, 1, len < sizeof text ? len : sizeof text - 1, stdout);
    if (kv) trn_kv_cache_reset(kv);
    for (int i = n_prompt; i < n_prompt + n; i++) {
        int start = i > window ? i - window : 0, T = i - start;
        trn_reset(m);
        if (kv) {
            if (fed == 0 || kv->len + (i - fed) > kv->max_T) { // (re)fill with the context's last part
                int keep = fed == 0 ? T : (kv->max_T + 1) / 2;
                trn_kv_cache_reset(kv);
                fed = i - keep;
            }
            trn_tensor *lg = cached(model, kv, ctx + fed, 1, i - fed);
            trn_read_range(m, lg, 0, logits, (size_t)Vp);
            fed = i;
        } else {
            trn_tensor *lg = forward(model, ctx + start, 1, T);
            trn_read_range(m, lg, (size_t)(T - 1) * Vp, logits, (size_t)Vp);
        }
        // top-k by partial selection sort: k passes over the V logits, for
        // a small k (40 of Llama 3's 128,256: 5M compares). A large k (all
        // 128,256 would be 8e9 compares a token) sorts (logit, id) pairs
        // instead, V log V. Then softmax over the k.
        if ((double)top_k * V <= (double)(1 << 24)) {
            for (int v = 0; v < V; v++) idx[v] = v;
            for (int k = 0; k < top_k; k++) {
                int best = k;
                for (int v = k + 1; v < V; v++) if (logits[idx[v]] > logits[idx[best]]) best = v;
                int t = idx[k]; idx[k] = idx[best]; idx[best] = t;
            }
        } else {
            top_pairs(idx, logits, V);
        }
        double sum = 0.0, mx = logits[idx[0]];
        for (int k = 0; k < top_k; k++) sum += exp((logits[idx[k]] - mx) / temperature);
        double u = trn_rng_uniform(rng) * sum, acc = 0.0;
        int pick = idx[top_k - 1];
        for (int k = 0; k < top_k; k++) {
            acc += exp((logits[idx[k]] - mx) / temperature);
            if (u < acc) { pick = idx[k]; break; }
        }
        ctx[i] = pick;
        const char *piece = trn_tokenizer_token(tok, pick, &len); // as is: no decoder's strip mid-text
        if (piece) memcpy(text, piece, len < sizeof text ? len : sizeof text);
        if (len == 0) len = (size_t)snprintf(text, sizeof text, "<%d>", pick); // no tokenizer knows it
        fwrite(text, 1, len < sizeof text ? len : sizeof text - 1, stdout);
        fflush(stdout);
    }
    trn_train(m);
    trn_set_grad_enabled(m, grad_was);
    free(ctx);
    free(logits);
    free(idx);
}

// The loss history, for the plot (and read back from --log on --resume).
typedef struct history {
    int n, cap, nv, capv;
    float *step, *loss;    // training loss per step
    float *vstep, *vloss;  // validation loss
} history;

static void hist_push(float **a, float **b, int *n, int *cap, float x, float y) {
    if (*n == *cap) {
        *cap = *cap ? 2 * *cap : 256;
        float *na = (float *)realloc(*a, sizeof(float) * (size_t)*cap), *nb;
        if (!na) return;
        *a = na;
        if (!(nb = (float *)realloc(*b, sizeof(float) * (size_t)*cap))) return;
        *b = nb;
    }
    (*a)[*n] = x;
    (*b)[*n] = y;
    (*n)++;
}

// --log: each record on disk when written; a failed write (a full disk,
// /dev/full) stops the run with one line, never a log cut mid-record
// and exit 0
static void log_flush(FILE *logf) {
    if (fflush(logf) != 0 || ferror(logf)) die("--log: a write failed: %s", strerror(errno));
}

// --log PATH for appending (resume) or writing (trn_open_output: a file,
// /dev/null, or a FIFO that something reads; never a hang)
static FILE *log_open(const char *path, int append) {
    FILE *f = trn_open_output(path, append ? "a" : "w");
    if (!f) die("--log %s", trn_error_reason());
    return f;
}

// at the end: the last records on disk, or one line and exit 2
static void log_close(FILE *logf) {
    if (logf && fclose(logf) != 0) die("--log: closing it failed: %s", strerror(errno));
}

// a validation result: on stdout, into the --log JSONL, into the plot
static void report_val(FILE *logf, history *h, long long step, float val) {
    printf("step %5lld | val_loss %.4f\n", step, val);
    if (logf) {
        fprintf(logf, "{\"step\":%lld,\"val_loss\":%.9g}\n", step, val);
        log_flush(logf);
    }
    hist_push(&h->vstep, &h->vloss, &h->nv, &h->capv, (float)step, val);
}

// a number after "key": in one line of our JSONL (or 0 if absent)
static int json_number(const char *line, const char *key, double *out) {
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(line, pat);
    if (!p) return 0;
    *out = strtod(p + strlen(pat), NULL);
    return 1;
}

// On --resume: keep the log's lines up to the checkpoint's step (a run
// killed after its last checkpoint logged steps that will now run again),
// and read the loss history back for the plot.
static void log_truncate_and_read(const char *path, long long upto, history *h) {
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) return; // (a FIFO: log_open refuses it)
    FILE *f = fopen(path, "rb");
    if (!f) return;
    char tmp[1100], line[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *o = fopen(tmp, "wb");
    if (!o) { fclose(f); return; }
    while (fgets(line, sizeof line, f)) {
        double step, v;
        if (!json_number(line, "step", &step) || step > (double)upto) continue;
        fputs(line, o);
        if (json_number(line, "val_loss", &v)) hist_push(&h->vstep, &h->vloss, &h->nv, &h->capv, (float)step, (float)v);
        else if (json_number(line, "loss", &v)) hist_push(&h->step, &h->loss, &h->n, &h->cap, (float)step, (float)v);
    }
    fclose(f);
    if (fclose(o) == 0) rename(tmp, path);
}

// loss.svg: training loss (thin, blue) and validation loss (orange dots),
// hand-written SVG, readable in any browser
static void write_plot(const char *path, const history *h, const char *title) {
    if (h->n == 0 && h->nv == 0) return;
    FILE *f = fopen(path, "w");
    if (!f) { fprintf(stderr, EX_PROG ": cannot write %s: %s\n", path, strerror(errno)); return; }
    const double W = 800, H = 450, x0 = 70, y0 = 30, pw = 700, ph = 360;
    double xmax = 1, ymin = 1e30, ymax = -1e30;
    for (int i = 0; i < h->n; i++) {
        if (h->step[i] > xmax) xmax = h->step[i];
        if (h->loss[i] < ymin) ymin = h->loss[i];
        if (h->loss[i] > ymax) ymax = h->loss[i];
    }
    for (int i = 0; i < h->nv; i++) {
        if (h->vstep[i] > xmax) xmax = h->vstep[i];
        if (h->vloss[i] < ymin) ymin = h->vloss[i];
        if (h->vloss[i] > ymax) ymax = h->vloss[i];
    }
    if (!(ymax > ymin)) { ymax = ymin + 1; }
    double pad = 0.05 * (ymax - ymin);
    ymin = ymin - pad < 0 ? 0 : ymin - pad;
    ymax += pad;
#define PX(s) (x0 + pw * (s) / xmax)
#define PY(v) (y0 + ph * (1.0 - ((v) - ymin) / (ymax - ymin)))
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" font-family=\"sans-serif\" font-size=\"12\">\n", W, H);
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    fprintf(f, "<text x=\"%.0f\" y=\"18\" font-size=\"14\">%s</text>\n", x0, title);
    for (int k = 0; k <= 5; k++) { // grid and tick labels
        double v = ymin + (ymax - ymin) * k / 5.0, s = xmax * k / 5.0;
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", x0, PY(v), x0 + pw, PY(v));
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%.2f</text>\n", x0 - 6, PY(v) + 4, v);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", PX(s), y0, PX(s), y0 + ph);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%.0f</text>\n", PX(s), y0 + ph + 16, s);
    }
    fprintf(f, "<rect x=\"%.0f\" y=\"%.0f\" width=\"%.0f\" height=\"%.0f\" fill=\"none\" stroke=\"black\"/>\n", x0, y0, pw, ph);
    fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\">step</text>\n", x0 + pw / 2, H - 10);
    fprintf(f, "<text x=\"16\" y=\"%.0f\" transform=\"rotate(-90 16 %.0f)\" text-anchor=\"middle\">loss (nats/token)</text>\n",
            y0 + ph / 2, y0 + ph / 2);
    if (h->n) {
        fprintf(f, "<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"1.2\" points=\"");
        for (int i = 0; i < h->n; i++) fprintf(f, "%.1f,%.1f ", PX(h->step[i]), PY(h->loss[i]));
        fprintf(f, "\"/>\n");
    }
    if (h->nv) {
        fprintf(f, "<polyline fill=\"none\" stroke=\"#ff7f0e\" stroke-width=\"2\" points=\"");
        for (int i = 0; i < h->nv; i++) fprintf(f, "%.1f,%.1f ", PX(h->vstep[i]), PY(h->vloss[i]));
        fprintf(f, "\"/>\n");
        for (int i = 0; i < h->nv; i++)
            fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"#ff7f0e\"/>\n", PX(h->vstep[i]), PY(h->vloss[i]));
    }
    fprintf(f, "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"#1f77b4\" stroke-width=\"2\"/>"
               "<text x=\"%.0f\" y=\"%.0f\">train</text>\n", x0 + pw - 150, y0 + 15, x0 + pw - 125, y0 + 15, x0 + pw - 120, y0 + 19);
    fprintf(f, "<circle cx=\"%.0f\" cy=\"%.0f\" r=\"3.5\" fill=\"#ff7f0e\"/><text x=\"%.0f\" y=\"%.0f\">validation</text>\n",
            x0 + pw - 70, y0 + 15, x0 + pw - 60, y0 + 19);
    fprintf(f, "</svg>\n");
#undef PX
#undef PY
    fclose(f);
}

// ===========================================================================
// >>flags: the run's hyperparameters, parsed, saved and restored
// ===========================================================================

// The hyperparameters of a run, saved in every checkpoint so that
// `--resume DIR` alone continues the same run (flags given again win).
typedef struct run_args {
    const char *tokenizer; // --tokenizer FILE (tokenizer.json)
    const char *model, *data, *bpe, *out, *resume, *init, *log, *prompt, *dump_logits;
    const char *shard; // --shard (examples/gpt2's data parallelism)
    const char *precision; // --precision fp32|tf32|bf16 (CUDA builds); not in the checkpoint
    const char *attention; // --attention fused|materialized; NULL: by the precision (attention_kind)
    long long steps;
    int batch, seq, warmup, grad_accum, eval_every, eval_batches, ckpt_every, keep, sample, threads, top_k;
    float lr, min_lr, weight_decay, clip, temperature;
    long long seed;
    int overfit;
    int recompute; // memory only: not in the checkpoint (results are identical)
    // the loop's extras (extras/train_loop.h); -1: from the checkpoint, else off
    const char *tensorboard, *csv;
    int async_ckpt, keep_best, patience, fast_dev_run, profile, limit_val_n;
    float skip_spikes, limit_val; // limit_val: a fraction (written with a '.'), limit_val_n: a count
    double max_time;
} run_args;

static void run_to_meta(const run_args *a, trn_meta *meta) {
    trn_meta_set_u64(meta, "run.batch", (uint64_t)a->batch);
    trn_meta_set_u64(meta, "run.seq", (uint64_t)a->seq);
    trn_meta_set_u64(meta, "run.grad_accum", (uint64_t)a->grad_accum);
    trn_meta_set_u64(meta, "run.warmup", (uint64_t)a->warmup);
    trn_meta_set_u64(meta, "run.steps", (uint64_t)a->steps);
    trn_meta_set_u64(meta, "run.seed", (uint64_t)a->seed);
    trn_meta_set_u64(meta, "run.overfit", (uint64_t)a->overfit);
    trn_meta_set_u64(meta, "run.eval_every", (uint64_t)a->eval_every);
    trn_meta_set_u64(meta, "run.eval_batches", (uint64_t)a->eval_batches);
    trn_meta_set_u64(meta, "run.ckpt_every", (uint64_t)a->ckpt_every);
    trn_meta_set_u64(meta, "run.keep", (uint64_t)a->keep);
    trn_meta_set_u64(meta, "run.sample", (uint64_t)a->sample);
    trn_meta_set_u64(meta, "run.keep_best", (uint64_t)a->keep_best);
    trn_meta_set_u64(meta, "run.patience", (uint64_t)a->patience);
    trn_meta_set_f64(meta, "run.skip_spikes", a->skip_spikes);
    trn_meta_set_f64(meta, "run.lr", a->lr);
    trn_meta_set_f64(meta, "run.min_lr", a->min_lr);
    trn_meta_set_f64(meta, "run.weight_decay", a->weight_decay);
    trn_meta_set_f64(meta, "run.clip", a->clip);
    trn_meta_set(meta, "run.data", a->data ? a->data : "");
    trn_meta_set(meta, "run.bpe", a->bpe ? a->bpe : "");
    trn_meta_set(meta, "run.tokenizer", a->tokenizer ? a->tokenizer : "");
}

static long long parse_int(const char *flag, const char *s, long long lo, long long hi) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) die("%s: '%s' is not an integer in [%lld, %lld]", flag, s, lo, hi);
    return v;
}

static float parse_float(const char *flag, const char *s, double lo, double hi) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi)) die("%s: '%s' is not a number in [%g, %g]", flag, s, lo, hi);
    return (float)v;
}


// Every flag at its "not given" value: -1 (or NULL) means "decided later":
// from the checkpoint when resuming, else from the preset or other flags.
static void args_init(run_args *a, const char *out) {
    memset(a, 0, sizeof *a);
    a->model = NULL;          // preset name
    a->out = out;             // run directory
    a->steps = -1;            // optimizer steps in the whole run [600]
    a->batch = -1;            // B [preset]
    a->seq = -1;              // T [preset]
    a->grad_accum = -1;       // micro-batches per step [1]
    a->lr = -1;               // peak learning rate [preset]
    a->min_lr = -1;           // floor of the cosine [lr / 10]
    a->warmup = -1;           // warmup steps [steps / 20]
    a->weight_decay = -1;     // AdamW weight decay [0.1]
    a->clip = -1;             // gradient clipping [1.0]
    a->seed = -1;             // everything random [1337]
    a->eval_every = -1;       // validation period [steps / 10]
    a->eval_batches = -1;     // batches per validation [8]
    a->ckpt_every = -1;       // checkpoint period [eval_every]
    a->keep = -1;             // checkpoints kept [3]
    a->sample = -1;           // tokens sampled at the end [400 bytes / 100 BPE tokens]
    a->temperature = 0.8f;    // sampling temperature
    a->top_k = 40;            // sample among the k most likely tokens
    a->threads = 0;           // 0: OpenMP's default (all cores)
    a->keep_best = -1;        // best checkpoints kept by val_loss [0: none]
    a->patience = -1;         // early stopping [0: never]
    a->skip_spikes = -1;      // spike guard z threshold [0: off]
}

// --precision, before the model is created: the CUDA backend's precision;
// the CPU backend computes in fp32 only
static void apply_precision(const char *p) {
    if (!p) return;
#ifdef TRN_USE_CUDA
    int v = trn_cuda_precision_parse(p);
    if (v < 0) die("--precision: fp32, tf32 or bf16, not '%s'", p);
    if (trn_cuda_set_precision((trn_cuda_precision)v) != TRN_OK) die("--precision: %s", trn_error_reason());
#else
    if (strcmp(p, "fp32")) die("--precision %s: this is the CPU build, which computes in fp32 (bf16 and tf32 are "
                               "for the CUDA build, e.g. examples/gpt2_cuda)", p);
#endif
}

// --attention, or its default: fused, except in fp32/tf32 on a GPU, where
// the fused kernels are CUDA-core fp32 loops (the FlashAttention-2 kernels
// are bf16 only): on the H100 (2026-11-27) a TF32 GPT-2 124M step took
// 381 ms with them and 119.5 ms materialized (at 21 GiB, B=16, T=1024)
static int attention_materialized(const run_args *a) {
    if (a->attention) return !strcmp(a->attention, "materialized");
#ifdef TRN_USE_CUDA
    return trn_cuda_get_precision() != TRN_CUDA_BF16;
#else
    return 0;
#endif
}

// argv -> a; a bad flag or value exits 2. Returns 1 when --help was asked
// (the caller prints its usage).
static int parse_args(run_args *a, int argc, char **argv) {
    int out_given = 0;
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        if (!strcmp(f, "--help") || !strcmp(f, "-h")) return 1;
        if (!strcmp(f, "--overfit")) { a->overfit = 1; continue; }
        if (!strcmp(f, "--recompute")) { a->recompute = 1; continue; }
        if (!strcmp(f, "--init-lenient")) { init_lenient = 1; continue; }
        if (!strcmp(f, "--async-ckpt")) { a->async_ckpt = 1; continue; }
        if (!strcmp(f, "--fast-dev-run")) { a->fast_dev_run = 1; continue; }
        if (!strcmp(f, "--profile")) { a->profile = 1; continue; }
        static const char *with_value[] = {"--model", "--data", "--bpe", "--tokenizer", "--init", "--out", "--resume", "--log",
                                           "--prompt", "--dump-logits", "--steps", "--batch", "--seq",
                                           "--grad-accum", "--warmup", "--eval-every", "--eval-batches",
                                           "--ckpt-every", "--keep", "--sample", "--top-k", "--threads", "--seed",
                                           "--lr", "--min-lr", "--weight-decay", "--clip", "--temperature",
                                           "--csv", "--tensorboard", "--keep-best", "--patience", "--max-time",
                                           "--limit-val-batches", "--skip-spikes", "--shard", "--precision", "--attention"};
        int known = 0;
        for (size_t k = 0; k < sizeof with_value / sizeof with_value[0]; k++) known |= !strcmp(f, with_value[k]);
        if (!known) die("unknown %s '%s' (see --help)", strncmp(f, "--", 2) ? "argument" : "flag", f);
        if (i + 1 >= argc) die("%s needs a value (see --help)", f);
        const char *v = argv[++i];
        if (!strcmp(f, "--model")) a->model = v;
        else if (!strcmp(f, "--data")) a->data = v;
        else if (!strcmp(f, "--bpe")) a->bpe = v;
        else if (!strcmp(f, "--tokenizer")) a->tokenizer = v;
        else if (!strcmp(f, "--init")) a->init = v;
        else if (!strcmp(f, "--out")) a->out = v, out_given = 1;
        else if (!strcmp(f, "--resume")) a->resume = v;
        else if (!strcmp(f, "--log")) a->log = v;
        else if (!strcmp(f, "--prompt")) a->prompt = v;
        else if (!strcmp(f, "--dump-logits")) a->dump_logits = v;
        else if (!strcmp(f, "--steps")) a->steps = parse_int(f, v, 0, 1000000000);
        else if (!strcmp(f, "--batch")) a->batch = (int)parse_int(f, v, 1, 1 << 20);
        else if (!strcmp(f, "--seq")) a->seq = (int)parse_int(f, v, 1, 1 << 20);
        else if (!strcmp(f, "--grad-accum")) a->grad_accum = (int)parse_int(f, v, 1, 1 << 20);
        else if (!strcmp(f, "--warmup")) a->warmup = (int)parse_int(f, v, 0, 1000000000);
        else if (!strcmp(f, "--eval-every")) a->eval_every = (int)parse_int(f, v, 0, 1000000000);
        else if (!strcmp(f, "--eval-batches")) a->eval_batches = (int)parse_int(f, v, 1, 1 << 20);
        else if (!strcmp(f, "--ckpt-every")) a->ckpt_every = (int)parse_int(f, v, 0, 1000000000);
        else if (!strcmp(f, "--keep")) a->keep = (int)parse_int(f, v, 1, 1000000);
        else if (!strcmp(f, "--sample")) a->sample = (int)parse_int(f, v, 0, 1 << 20);
        else if (!strcmp(f, "--top-k")) a->top_k = (int)parse_int(f, v, 1, 1 << 24);
        else if (!strcmp(f, "--threads")) a->threads = (int)parse_int(f, v, 1, 4096);
        else if (!strcmp(f, "--seed")) a->seed = parse_int(f, v, 0, (long long)9e18);
        else if (!strcmp(f, "--lr")) a->lr = parse_float(f, v, 1e-12, 10);
        else if (!strcmp(f, "--min-lr")) a->min_lr = parse_float(f, v, 0, 10);
        else if (!strcmp(f, "--weight-decay")) a->weight_decay = parse_float(f, v, 0, 10);
        else if (!strcmp(f, "--clip")) a->clip = parse_float(f, v, 0, 1e9);
        else if (!strcmp(f, "--temperature")) a->temperature = parse_float(f, v, 1e-3, 100);
        else if (!strcmp(f, "--shard")) a->shard = v;
        else if (!strcmp(f, "--precision")) a->precision = v;
        else if (!strcmp(f, "--attention")) {
            if (strcmp(v, "fused") && strcmp(v, "materialized")) die("--attention: fused or materialized, not '%s'", v);
            a->attention = v;
        }
        else if (!strcmp(f, "--csv")) a->csv = v;
        else if (!strcmp(f, "--tensorboard")) a->tensorboard = v;
        else if (!strcmp(f, "--keep-best")) a->keep_best = (int)parse_int(f, v, 0, 1000000);
        else if (!strcmp(f, "--patience")) a->patience = (int)parse_int(f, v, 0, 1000000000);
        else if (!strcmp(f, "--limit-val-batches") && strchr(v, '.')) a->limit_val = parse_float(f, v, 1e-9, 1);
        else if (!strcmp(f, "--limit-val-batches")) a->limit_val_n = (int)parse_int(f, v, 1, 1 << 20);
        else if (!strcmp(f, "--skip-spikes")) a->skip_spikes = parse_float(f, v, 0, 1e6);
        else if (!strcmp(f, "--max-time")) { // seconds, or with a unit: 90m, 2h
            char *end;
            double t = strtod(v, &end), unit = !strcmp(end, "h") ? 3600 : !strcmp(end, "m") ? 60 : 1;
            if (end == v || !(t > 0) || (*end && strcmp(end, "s") && unit == 1)) die("--max-time: '%s' is not like 3600, 90m or 2h", v);
            a->max_time = t * unit;
        }
    }
    if (a->fast_dev_run && a->resume) die("--fast-dev-run is a fresh smoke test: not with --resume");
    // --resume without --out saves where the run is: a run directory
    // itself, else the folder of the checkpoint file or ckpt_*.shards
    // (not the default runs/NAME, whose keep-K would prune another run)
    if (a->resume && !out_given) {
        struct stat st;
        char sub[1200];
        int is_dir = stat(a->resume, &st) == 0 && S_ISDIR(st.st_mode);
        snprintf(sub, sizeof sub, "%s/manifest.json", a->resume);
        if (is_dir && stat(sub, &st) != 0) a->out = a->resume;
        else {
            char *d = strdup(a->resume), *slash;
            if (!d) die("out of memory");
            while (strlen(d) > 1 && d[strlen(d) - 1] == '/') d[strlen(d) - 1] = 0;
            slash = strrchr(d, '/');
            if (!slash) { free(d); d = strdup("."); }
            else if (slash == d) d[1] = 0;
            else *slash = 0;
            a->out = d;
        }
    }
    return 0;
}

// the flags both programs take; models: the --model line's choices,
// training: the program's own lines of that section, tail: the last lines
static void print_usage(FILE *f, const char *what, const char *models, const char *init_what, const char *training,
                        const char *tail) {
    fprintf(f,
            "usage: %s [flags]          %s (defaults in brackets)\n"
            "model and data\n"
            "  --model NAME       %s\n"
            "  --data FILE        text file, or llm.c token shard (.bin) [the kit's own text]\n"
            "  --bpe DIR          GPT-2 tokenizer from DIR/vocab.json + DIR/merges.txt [bytes]\n"
            "  --tokenizer FILE   Hugging Face tokenizer.json (BPE) for text data, --prompt and samples\n"
            "                     [examples/llama: tokenizer.json beside --init; else bytes]\n"
            "  --init PATH        start from weights: %s\n"
            "  --init-lenient     --init loads NaN/inf values and ignores tensors the model has no use for\n"
            "training\n"
            "  --steps N          optimizer steps of the whole run [600]\n"
            "  --batch B          sequences per micro-batch [preset]\n"
            "  --seq T            tokens per sequence [preset]\n"
            "  --grad-accum K     micro-batches per step [1]\n"
            "  --lr X             peak learning rate [preset]\n"
            "  --min-lr X         final learning rate of the cosine [lr/10]\n"
            "  --warmup N         linear warmup steps [steps/20]\n"
            "  --weight-decay X   AdamW decoupled weight decay on matrices [0.1]\n"
            "  --clip X           clip the global gradient norm, 0 = off [1.0]\n"
            "  --seed N           initialization, data order, sampling [1337]\n"
            "  --threads N        OpenMP threads [all cores]\n"
            "  --precision P      CUDA builds: fp32, tf32 (TF32 matmuls) or bf16 (mixed precision:\n"
            "                     bf16 activations, fp32 master weights) [tf32]; the CPU is fp32\n"
            "  --attention KIND   fused (flash-style: keeps (B,NH,T) per layer) or materialized (keeps\n"
            "                     the (B,NH,T,T) probabilities) [fused; CUDA fp32/tf32: materialized,\n"
            "                     3.2x faster there on an H100: its fused kernels are CUDA-core fp32]\n"
            "%s"
            "  --overfit          train on one fixed batch (the loss should go to ~0)\n"
            "  --recompute        keep only each block's input; re-run the block in backward\n"
            "                     (activation checkpointing: less memory, same gradients)\n"
            "evaluation, output\n"
            "  --eval-every N     validation every N steps [steps/10]\n"
            "  --eval-batches N   batches per validation [8]\n"
            "  --sample N         tokens to generate at the end [preset: 400 bytes / 100 tokens]\n"
            "  --prompt TEXT      start of the generated text [newline / <|endoftext|>]\n"
            "  --temperature X    [0.8]   --top-k K [40]\n"
            "  --out DIR          checkpoints, model.safetensors, loss.svg [runs/%s]\n"
            "  --ckpt-every N     checkpoint every N steps, 0 = never [eval-every]\n"
            "  --keep K           checkpoints kept in --out [3]\n"
            "  --resume PATH      continue from a checkpoint file or run directory (newest valid)\n"
            "  --log FILE         one JSON object per line per step and validation [OUT/log.jsonl]\n"
            "  --dump-logits FILE write the logits of validation batch 0 (float32) at the end\n"
            "  --csv FILE         one CSV row per step (val_loss filled at validation steps)\n"
            "  --tensorboard DIR  TensorBoard event files: loss, val_loss, lr, grad_norm, tokens/s, memory\n"
            "loop policy (Lightning's Trainer and callbacks)\n"
            "  --async-ckpt       write checkpoints from a background thread (training waits for a copy only)\n"
            "  --keep-best K      also keep the K best checkpoints by val_loss (of those at a validation step)\n"
            "                     as best_<step>.safetensors [0]\n"
            "  --patience N       stop after N validations without a new best val_loss [0: never]\n"
            "  --max-time T       stop cleanly with a checkpoint after T seconds (or 90m, 2h)\n"
            "  --limit-val-batches X  validation batches: a count (8), or a fraction of the split (0.25, 1.0)\n"
            "  --fast-dev-run     one training step and one validation batch, no files written\n"
            "  --skip-spikes Z    skip the update when loss or grad norm is Z std above the last 100 [off]\n"
            "  --profile          time and bytes per op kind (forward, backward) after the run\n"
            "  --help\n"
            "%s",
            EX_PROG, what, models, init_what, training, EX_PROG, tail);
}

// On --resume, flags not given again come from the checkpoint's metadata.
static void args_from_checkpoint(run_args *a, const trn_safetensors *ck) {
#define FROM_CK_INT(field, key) do { if (a->field < 0 && st_meta_long(ck, key) >= 0) a->field = st_meta_long(ck, key); } while (0)
#define FROM_CK_F(field, key) do { const char *s_ = trn_safetensors_meta(ck, key); if (a->field < 0 && s_) a->field = (float)atof(s_); } while (0)
#define FROM_CK_STR(field, key) do { const char *s_ = trn_safetensors_meta(ck, key); if (!a->field && s_ && *s_) a->field = strdup(s_); } while (0)
    FROM_CK_INT(batch, "run.batch");
    FROM_CK_INT(seq, "run.seq");
    FROM_CK_INT(grad_accum, "run.grad_accum");
    FROM_CK_INT(warmup, "run.warmup");
    FROM_CK_INT(steps, "run.steps");
    FROM_CK_INT(seed, "run.seed");
    FROM_CK_INT(eval_every, "run.eval_every");
    FROM_CK_INT(eval_batches, "run.eval_batches");
    FROM_CK_INT(ckpt_every, "run.ckpt_every");
    FROM_CK_INT(keep, "run.keep");
    FROM_CK_INT(sample, "run.sample");
    FROM_CK_INT(keep_best, "run.keep_best");
    FROM_CK_INT(patience, "run.patience");
    FROM_CK_F(skip_spikes, "run.skip_spikes");
    FROM_CK_F(lr, "run.lr");
    FROM_CK_F(min_lr, "run.min_lr");
    FROM_CK_F(weight_decay, "run.weight_decay");
    FROM_CK_F(clip, "run.clip");
    FROM_CK_STR(data, "run.data");
    FROM_CK_STR(bpe, "run.bpe");
    FROM_CK_STR(tokenizer, "run.tokenizer");
#undef FROM_CK_INT
#undef FROM_CK_F
#undef FROM_CK_STR
    if (st_meta_long(ck, "run.overfit") == 1) a->overfit = 1;
}

// The defaults of what is still unset, from the preset (batch, seq, lr)
// and the model (context, vocabulary); contradictions exit 2.
static void args_defaults(run_args *a, int batch, int seq, float lr, int block_size, int vocab_size) {
    if (a->steps < 0) a->steps = 600;
    if (a->batch < 0) a->batch = batch;
    if (a->seq < 0) a->seq = seq < block_size ? seq : block_size;
    if (a->grad_accum < 0) a->grad_accum = 1;
    if (a->lr < 0) a->lr = lr;
    if (a->min_lr < 0) a->min_lr = a->lr / 10;
    if (a->warmup < 0) a->warmup = (int)(a->steps / 20);
    if (a->weight_decay < 0) a->weight_decay = 0.1f;
    if (a->clip < 0) a->clip = 1.0f;
    if (a->seed < 0) a->seed = 1337;
    if (a->eval_every < 0) a->eval_every = a->steps >= 10 ? (int)(a->steps / 10) : 1;
    if (a->ckpt_every < 0) a->ckpt_every = a->eval_every;
    if (a->eval_batches < 0) a->eval_batches = 8;
    if (a->keep < 0) a->keep = 3;
    if (a->sample < 0) a->sample = vocab_size <= 256 ? 400 : 100;
    if (a->keep_best < 0) a->keep_best = 0;
    if (a->patience < 0) a->patience = 0;
    if (a->skip_spikes < 0) a->skip_spikes = 0;
    if (a->fast_dev_run) { // Lightning's fast_dev_run: one batch of each, nothing on disk
        a->steps = 1; a->eval_every = 0; a->eval_batches = 1; a->ckpt_every = 0; a->sample = 0;
        a->log = a->csv = a->tensorboard = a->dump_logits = NULL;
    } else if (!a->log) { // the run's history lives in its directory: a resume redraws the whole loss.svg from it
        static char log_path[1200];
        snprintf(log_path, sizeof log_path, "%s/log.jsonl", a->out);
        a->log = log_path;
    }
    if (a->seq > block_size) die("--seq %d is longer than the model's context of %d tokens", a->seq, block_size);
    if (a->min_lr > a->lr) die("--min-lr %g is above --lr %g", a->min_lr, a->lr);
    if (!a->bpe && !a->tokenizer && vocab_size > 256 && !a->data && a->steps > 0)
        die("the model has a %d-token vocabulary: give --tokenizer FILE (tokenizer.json), --bpe DIR (GPT-2's "
            "vocab.json + merges.txt) or --data SHARD.bin", vocab_size);
}

// What the next step depends on beyond the weights and AdamW (which are
// the checkpoint's tensors): the step, the sampling RNG, the data position.
static void run_state_to_meta(trn_meta *meta, long long step, const trn_rng *sample_rng, const trn_loader *ld) {
    trn_loader_pos pos = trn_loader_tell(ld);
    trn_meta_set_u64(meta, "run.step", (uint64_t)step);
    trn_meta_set_u64(meta, "run.sample_rng", sample_rng->state);
    trn_meta_set_u64(meta, "run.data_epoch", (uint64_t)pos.epoch);
    trn_meta_set_u64(meta, "run.data_batch", (uint64_t)pos.batch);
    trn_meta_set_u64(meta, "run.data_seed", pos.seed);
    trn_meta_set_u64(meta, "run.data_check", pos.check);
}

// ... and back, on --resume (a checkpoint without it, or of other data, exits 2)
static long long run_state_from_meta(const trn_meta *meta, const char *path, trn_rng *sample_rng, trn_loader *ld) {
    uint64_t u, e = 0, b = 0;
    trn_loader_pos pos;
    if (trn_meta_get_u64(meta, "run.step", &u) != TRN_OK) die("--resume %s: no step in the checkpoint", path);
    long long step = (long long)u;
    if (trn_meta_get_u64(meta, "run.sample_rng", &u) == TRN_OK) sample_rng->state = u;
    if (trn_meta_get_u64(meta, "run.data_epoch", &e) != TRN_OK || trn_meta_get_u64(meta, "run.data_batch", &b) != TRN_OK ||
        trn_meta_get_u64(meta, "run.data_seed", &pos.seed) != TRN_OK ||
        trn_meta_get_u64(meta, "run.data_check", &pos.check) != TRN_OK)
        die("--resume %s: no data position in the checkpoint", path);
    pos.epoch = (int64_t)e;
    pos.batch = (int64_t)b;
    if (trn_loader_seek(ld, &pos) != TRN_OK) die("--resume %s: the data differs from the run's (%s)", path, trn_error_reason());
    return step;
}

// ===========================================================================
// >>loop: the loop's extras (extras/train_loop.h): progress and ETA, CSV,
// TensorBoard, async checkpoints, the best checkpoints, early stopping,
// --max-time, the spike guard, the profile
// ===========================================================================

typedef struct run_loop {
    trn_progress prog;     // the step line, + ETA; on a terminal, in place
    trn_csv csv;           // --csv
    int csv_on;
    trn_tb_writer tb;      // --tensorboard (tb.f NULL: off)
    trn_ckpt_async ack;    // --async-ckpt
    trn_profile prof;      // --profile
    trn_spike_guard guard; // --skip-spikes: its window goes into the checkpoint
    trn_early_stop early;  // --patience: its best and count too
    double t_begin;        // --max-time counts from here
    double t_start, wall;  // the loop's own time
    long long first_step;  // the first step this process runs
    int interrupted;       // stopped by Ctrl-C: loop_finish exits 130
    float first_loss, last_loss;
} run_loop;

// what one step measured: the progress line, the JSONL, the CSV, TensorBoard
typedef struct step_stats {
    long long step;
    float loss, lr, norm;
    double ms, tps;
    size_t mem;
    int skipped; // --skip-spikes skipped its update
} step_stats;

// Ctrl-C (SIGINT), as Lightning and torchtitan do it: the first press lets
// the step finish, saves a checkpoint and says how to resume (the loop's
// stop, like --max-time; the program then exits 130); a second press stops
// at once (the default action: killed by SIGINT, exit status 130 too).
static const char LOOP_CTRL_C[] = "interrupted (Ctrl-C)";
static volatile sig_atomic_t loop_sigints;
static void loop_on_sigint(int sig) {
    static const char msg[] = "\ninterrupted: the step finishes, then a checkpoint (Ctrl-C again stops at once)\n";
    if (loop_sigints++ > 0) { signal(sig, SIG_DFL); raise(sig); return; }
    if (write(2, msg, sizeof msg - 1) < 0) loop_sigints++;
}
static double loop_interrupted(void) { return loop_sigints > 0; }

// before a resume (which restores the guard and the early stop)
static void loop_init(run_loop *L, const run_args *a, double t_begin) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = loop_on_sigint;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGINT, &sa, NULL);
    memset(L, 0, sizeof *L);
    L->t_begin = t_begin;
    trn_spike_guard_init(&L->guard, a->skip_spikes);
    trn_early_stop_init(&L->early, a->patience);
}

static void loop_resume(run_loop *L, const trn_meta *meta) {
    CHECK_OK(trn_spike_guard_load(&L->guard, meta));
    CHECK_OK(trn_early_stop_load(&L->early, meta));
}

// the files and hooks, once the model exists; writer: the rank that writes
static void loop_open(run_loop *L, const run_args *a, trn_model *m, long long step, int resumed, int writer) {
    trn_progress_init(&L->prog, step, a->steps);
    L->first_step = step + 1;
    L->first_loss = L->last_loss = -1;
    L->csv_on = writer && a->csv;
    if (L->csv_on && trn_csv_open(&L->csv, a->csv, "step,loss,val_loss,lr,grad_norm,ms,tok_per_s,mem_bytes,skipped",
                                  resumed ? step : -1) != TRN_OK)
        die("--csv %s", trn_error_reason());
    if (writer && a->tensorboard && trn_tb_open(&L->tb, a->tensorboard) != TRN_OK) die("--tensorboard %s", trn_error_reason());
    L->ack.keep = a->keep;
#ifdef TRN_USE_CUDA
    L->ack.host_alloc = trn_cuda_host_alloc; // pinned: the device-to-host copy at full speed
    L->ack.host_free = trn_cuda_host_free;
#endif
    if (a->profile) trn_profile_attach(&L->prof, m);
#ifdef TRN_USE_CUDA
    if (a->profile) trn_cuda_profile_clock(&L->prof); // CUDA events: no sync per op
#endif
    L->t_start = now_s();
}

// a validation result: stdout, the JSONL, the plot (report_val), TensorBoard
static void loop_val(run_loop *L, FILE *logf, history *h, long long step, float val) {
    trn_progress_break(&L->prog);
    report_val(logf, h, step, val);
    if (L->tb.f) CHECK_OK(trn_tb_scalar(&L->tb, "val_loss", step, val));
}

// a training step: its line (with the ETA), the JSONL, TensorBoard, the plot
static void loop_step(run_loop *L, const run_args *a, FILE *logf, history *h, const step_stats *s) {
    char line[256];
    snprintf(line, sizeof line, "step %5lld/%lld | loss %.4f | lr %.2e | norm %.3f | %7.1f ms | %6.0f tok/s | mem %.1f MiB",
             s->step, a->steps, s->loss, s->lr, s->norm, s->ms, s->tps, s->mem / 1048576.0);
    trn_progress_step(&L->prog, s->step, s->loss, s->tps, line);
    if (s->skipped) {
        trn_progress_break(&L->prog);
        printf("step %5lld | spike: loss z %.1f, norm z %.1f (--skip-spikes %g): update skipped (%lld so far)\n", s->step,
               L->guard.z_loss, L->guard.z_norm, a->skip_spikes, L->guard.skipped);
    }
    if (logf)
        fprintf(logf, "{\"step\":%lld,\"loss\":%.9g,\"lr\":%.9g,\"grad_norm\":%.9g,\"ms\":%.3f,\"tok_per_s\":%.1f,\"mem_bytes\":%zu%s}\n",
                s->step, s->loss, s->lr, s->norm, s->ms, s->tps, s->mem, s->skipped ? ",\"skipped\":1" : ""), log_flush(logf);
    if (L->tb.f) {
        CHECK_OK(trn_tb_scalar(&L->tb, "loss", s->step, s->loss));
        CHECK_OK(trn_tb_scalar(&L->tb, "lr", s->step, s->lr));
        CHECK_OK(trn_tb_scalar(&L->tb, "grad_norm", s->step, s->norm));
        CHECK_OK(trn_tb_scalar(&L->tb, "tokens_per_s", s->step, s->tps));
        CHECK_OK(trn_tb_memory(&L->tb, s->step));
    }
    hist_push(&h->step, &h->loss, &h->n, &h->cap, (float)s->step, s->loss);
    if (L->first_loss < 0) L->first_loss = s->loss;
    L->last_loss = s->loss;
}

// after a validation at a step: the plot (if this process writes files);
// returns why to stop (--patience) or NULL
static const char *loop_validated(run_loop *L, const run_args *a, const history *h, const char *title, long long step,
                                  float val, int files) {
    char path[1200];
    snprintf(path, sizeof path, "%s/loss.svg", a->out);
    if (files) write_plot(path, h, title);
    return trn_early_stop_update(&L->early, step, val) && step < a->steps ? "early stopping (--patience)" : NULL;
}

// the end of a step, after its validation (val: NAN when there was none)
static void loop_step_end(run_loop *L, const step_stats *s, float val) {
    if (L->csv_on) {
        double row[9] = {(double)s->step, s->loss, val, s->lr, s->norm, s->ms, s->tps, (double)s->mem, (double)s->skipped};
        CHECK_OK(trn_csv_row(&L->csv, row));
    }
    if (L->tb.f) CHECK_OK(trn_tb_flush(&L->tb));
}

// --max-time: this process's clock says stop (1) or not (0)
static double loop_over_time(const run_loop *L, const run_args *a) {
    return a->max_time > 0 && now_s() - L->t_begin >= a->max_time;
}


// the loop's state in a checkpoint; val_now: this step validated, to val
static void loop_to_meta(const run_loop *L, const run_args *a, trn_meta *meta, int val_now, float val) {
    if (a->skip_spikes > 0) trn_spike_guard_save(&L->guard, meta);
    trn_early_stop_save(&L->early, meta);
    if (val_now) trn_meta_set_f64(meta, "val_loss", val); // ranks --keep-best
}

// a whole-state checkpoint into a->out: from a background thread
// (--async-ckpt) or now; --keep-best ranks those written at a validation
static void loop_save(run_loop *L, const run_args *a, long long step, trn_model *m, trn_adamw *opt, const trn_meta *meta,
                      int val_now) {
    trn_progress_break(&L->prog);
    if (a->async_ckpt) { // a copy now, the file from a background thread while training goes on
        L->ack.keep_best = val_now ? a->keep_best : 0;
        CHECK_OK(trn_checkpoint_save_async(&L->ack, a->out, step, m, opt, meta));
        printf("checkpoint %s (async: training waited %.1f ms, %.1f ms of it for the previous save)\n", L->ack.path,
               1e3 * L->ack.stage_seconds, 1e3 * L->ack.wait_seconds);
    } else {
        char path[1200];
        double ts = now_s();
        CHECK_OK(trn_checkpoint_save_dir(a->out, step, a->keep, m, opt, meta, path, sizeof path));
        if (a->keep_best > 0 && val_now) CHECK_OK(trn_checkpoint_keep_best(a->out, path, a->keep_best));
        printf("checkpoint %s (training waited %.1f ms)\n", path, 1e3 * (now_s() - ts));
    }
}

// why the loop ended early (--patience, --max-time, Ctrl-C), and how to go
// on; the best val_loss only for --patience (after --max-time or Ctrl-C the
// final validation, below, may be better than any so far)
static void loop_stopped(run_loop *L, const run_args *a, long long step, const char *why) {
    char best[96] = "";
    trn_progress_break(&L->prog);
    L->interrupted = why == LOOP_CTRL_C;
    if (L->early.patience > 0 && L->early.best_step >= 0 && why != LOOP_CTRL_C && strcmp(why, "--max-time") != 0)
        snprintf(best, sizeof best, " (best val_loss %.4f at step %lld)", L->early.best, L->early.best_step);
    printf("stopped at step %lld: %s%s; --resume %s continues\n", step, why, best, a->out);
}

// after the loop: the last async save on disk, the profile
static void loop_finish(run_loop *L, const run_args *a) {
    L->wall = now_s() - L->t_start;
    trn_progress_break(&L->prog);
    if (L->ack.saves) { // the last async save must be on disk before we go on
        CHECK_OK(trn_checkpoint_wait(&L->ack));
        printf("async checkpoints: %lld written in the background, the last in %.2f s\n", L->ack.saves,
               L->ack.write_seconds);
    }
    trn_ckpt_async_free(&L->ack);
    if (a->profile) {
        trn_profile_print(&L->prof, stdout);
        trn_profile_free(&L->prof);
    }
    if (L->interrupted) { // Ctrl-C: the checkpoint is on disk, loop_stopped said how to resume
        fflush(stdout);
        exit(130);
    }
}

// after the final validation: the CSV and TensorBoard files closed, and
// what the run did
static void loop_close(run_loop *L, long long step, float val) {
    if (L->tb.f) CHECK_OK(trn_tb_close(&L->tb));
    if (L->csv_on) CHECK_OK(trn_csv_close(&L->csv));
    if (L->first_loss >= 0)
        printf("trained steps %lld..%lld in %.1f s: loss %.4f -> %.4f, val_loss %.4f\n", L->first_step, step, L->wall,
               L->first_loss, L->last_loss, val);
    printf("final val_loss %.9g\n", val);
}

// --limit-val-batches and the split's size decide the batches per
// validation (each of W ranks takes eval_batches of them)
static void args_eval_batches(run_args *a, int64_t val_batches, int W) {
    if (a->limit_val_n > 0 && !a->fast_dev_run) a->eval_batches = a->limit_val_n; // Lightning's int: a count
    if (a->limit_val > 0 && !a->fast_dev_run) // its float: a fraction of this rank's share of the split
        a->eval_batches = (int)fmax(1, floor(a->limit_val * (double)(val_batches / W)));
    if ((int64_t)a->eval_batches * W > val_batches && val_batches >= W) a->eval_batches = (int)(val_batches / W);
}

// --dump-logits: the raw float32 logits tensor, for comparisons with a reference
static void dump_logits(const char *path, trn_model *m, const trn_tensor *logits) {
    FILE *f = fopen(path, "wb");
    if (!f) die("--dump-logits %s: %s", path, strerror(errno));
    float *host = (float *)malloc(sizeof(float) * logits->size);
    if (!host) die("out of memory");
    trn_read(m, logits, host);
    if (fwrite(host, sizeof(float), logits->size, f) != logits->size || fclose(f) != 0)
        die("--dump-logits %s: write failed", path);
    free(host);
}


// --resume PATH: a checkpoint file, or a run directory (its newest valid
// checkpoint); its path goes to path, the open file to ck; trouble exits 2
static void resume_open(const char *resume, char *path, size_t cap, trn_safetensors *ck) {
    struct stat st;
    if (stat(resume, &st) != 0) die("--resume %s: %s", resume, strerror(errno));
    if (S_ISDIR(st.st_mode)) {
        long long s;
        if (trn_checkpoint_latest(resume, path, cap, &s) != TRN_OK) die("--resume %s: %s", resume, trn_error_reason());
    } else {
        snprintf(path, cap, "%s", resume);
    }
    if (trn_safetensors_open(ck, path) != TRN_OK) die("--resume %s: %s", path, trn_error_reason());
}

// --sample: a newline (bytes) or <|endoftext|> (BPE), or --prompt, then
// a->sample tokens from sample_text
static void sample_run(const run_args *a, trn_model *m, logits_fn forward, void *model, int V, int Vp,
                       const trn_tokenizer *tok, int window, trn_rng *rng, cached_logits_fn cached, trn_kv_cache *kv) {
    trn_tokens p;
    memset(&p, 0, sizeof p);
    int start[1];
    start[0] = V <= 256 ? '\n' : tok->bos_id >= 0 ? tok->bos_id : (tok->eot_id >= 0 ? tok->eot_id : 0);
    const int *prompt = start;
    int n_prompt = 1;
    if (a->prompt && *a->prompt) {
        // with the BOS of a tokenizer.json, as tokenizer(prompt) in Python
        if (trn_tokenizer_encode_ex(tok, a->prompt, strlen(a->prompt), TRN_ENCODE_BOS, &p) != TRN_OK)
            die("--prompt: %s", trn_error_reason());
        if (trn_tokens_check(p.ids, p.n, V) != TRN_OK) die("--prompt: %s", trn_error_reason());
        prompt = p.ids;
        n_prompt = (int)(p.n < (size_t)window ? p.n : (size_t)window);
    }
    printf("---- sample (%d tokens, temperature %g, top-k %d) ----\n", a->sample, a->temperature, a->top_k);
    sample_text(m, forward, model, V, Vp, tok, prompt, n_prompt, a->sample, window, a->temperature, a->top_k, rng,
                cached, kv);
    printf("\n----\n");
    trn_tokens_free(&p);
}

// ===========================================================================
// >>run: the whole run, for every language model here (examples/gpt2.c and
// examples/llama.c call run_main with their model's lm_example): flags,
// data-parallel ranks (train_nccl.h: one rank of W; W = 1 without a
// launcher), --resume (whole or sharded checkpoints), the data, the
// training loop with its extras, and the end (the final validation, the
// plot, the weights, a sample). Compiled where train_nccl.h is included.
// ===========================================================================
#ifdef TRAIN_NCCL_H_INCLUDED

// what the run needs to know of a model's shape (V and Vp: lm_example)
typedef struct lm_dims {
    int n_layer, n_embd, block_size;
    int kv_heads, head_dim; // of the key/value cache for sampling
} lm_dims;

// a model, as the run drives it: the program keeps the model itself
typedef struct lm_example {
    const char *models;    // --help's --model line; the known presets
    int data_parallel;     // 0: --shard is refused
    float beta2;           // AdamW's beta2 in the model's recipe
    void *model;           // handed to logits / logits_cached
    int *V, *Vp;           // the config's vocabulary: the tokenizer may set it
    int *recompute;        // the model's --recompute switch
    void (*usage)(FILE *f);
    // the shape: the checkpoint's (ck), else --init's, else the preset's
    // (0: no such preset); the preset's batch, sequence length and lr
    int (*configure)(const run_args *a, const trn_safetensors *ck, const char *ck_path, lm_dims *d, int *batch,
                     int *seq, float *lr);
    trn_model *(*create)(void);                    // NULL: cannot (a reason is left)
    void (*init)(const char *init, uint64_t seed); // --init's weights, or fresh ones
    void (*describe)(void);                                // the "model: ..." line
    void (*to_meta)(trn_meta *meta);                       // the config, into a checkpoint
    trn_tensor *(*loss)(const int *x, const int *y, int B, int T); // mean loss of a batch
    logits_fn logits;
    cached_logits_fn logits_cached;
    void (*free)(void);
    int tokenizer_beside_init; // 1: --tokenizer defaults to tokenizer.json beside --init
} lm_example;

static trn_ddp ddp; // this rank of W

// a collective failed (a rank died or hung): say why, close the
// communicator so the other ranks stop now too, exit 1
#define DDP_OK(call)                                                                         \
    do {                                                                                     \
        if ((call) != TRN_OK) {                                                              \
            fprintf(stderr, EX_PROG ": rank %d: %s\n", ddp.rank, trn_error_reason());        \
            trn_ddp_abort(&ddp);                                                             \
            exit(1);                                                                         \
        }                                                                                    \
    } while (0)

// This rank's next batch. The loader walks one global order on every rank;
// each draw takes W batches and keeps the rank-th, so this rank's k-th
// batch is global batch k*W + rank (trn_ddp_batch_index): the ranks never
// overlap, together they see what one rank with a W times larger --batch
// sees, and every loader stays at the same position (the one a checkpoint
// saves).
static void next_batch(trn_loader *ld, int *x, int *y, int *skip_x, int *skip_y) {
    for (int r = 0; r < ddp.world; r++) trn_loader_next(ld, r == ddp.rank ? x : skip_x, r == ddp.rank ? y : skip_y);
}

// Sharded checkpoints (--shard with several ranks). Every rank holds only
// part of the state, so every rank writes its slice: DIR/ckpt_<step>.shards/
// holds one file per rank and, written last, manifest.json (train_nccl.h's
// trn_ddp_checkpoint_save_sharded). tools/consolidate merges one into a
// model.safetensors.
// the newest DIR/ckpt_*.shards whose save finished (has its manifest) and
// passes trn_checkpoint_verify_sharded (every rank file there, checksummed,
// of the manifest's save), or "". A broken one is skipped, saying which
// and why, as trn_checkpoint_latest does for whole-state checkpoints; none
// valid exits 2 with the newest one's reason. Every rank decides alone,
// from the same files, the same way.
static void latest_shards(const char *dir, char *out, size_t cap) {
    glob_t gl;
    char pat[1100], first[600] = "";
    out[0] = 0;
    snprintf(pat, sizeof pat, "%s/ckpt_*.shards/manifest.json", dir);
    if (glob(pat, 0, NULL, &gl) == 0 && gl.gl_pathc > 0) {
        for (size_t i = gl.gl_pathc; i-- > 0 && !out[0];) { // zero-padded steps: the last is the newest
            snprintf(out, cap, "%s", gl.gl_pathv[i]);
            *strrchr(out, '/') = 0;
            if (trn_checkpoint_verify_sharded(out) == TRN_OK) break;
            if (trn_ddp_is_main(&ddp)) fprintf(stderr, EX_PROG ": skipping a broken sharded checkpoint: %s\n", trn_error_reason());
            if (!first[0]) snprintf(first, sizeof first, "%s", trn_error_reason());
            out[0] = 0;
        }
        if (!out[0]) die("--resume %s: no valid sharded checkpoint (%zu broken; newest: %s)", dir, gl.gl_pathc, first);
    }
    globfree(&gl);
}

// rank 0's file of a sharded checkpoint: its metadata has the run's flags
static int shards_rank0(const char *sdir, char *out, size_t cap) {
    glob_t gl;
    char pat[1100];
    int found = 0;
    snprintf(pat, sizeof pat, "%s/rank-00000-of-*.safetensors", sdir);
    if (glob(pat, 0, NULL, &gl) == 0 && gl.gl_pathc == 1) { snprintf(out, cap, "%s", gl.gl_pathv[0]); found = 1; }
    globfree(&gl);
    return found;
}

// rank 0, after a save: only the newest `keep` sharded checkpoints stay
static void prune_shards(const char *dir, int keep) {
    glob_t gl, files;
    char pat[1100];
    snprintf(pat, sizeof pat, "%s/ckpt_*.shards", dir);
    if (glob(pat, 0, NULL, &gl) != 0) return;
    for (size_t i = 0; keep > 0 && i + (size_t)keep < gl.gl_pathc; i++) {
        snprintf(pat, sizeof pat, "%s/*", gl.gl_pathv[i]);
        if (glob(pat, 0, NULL, &files) == 0)
            for (size_t k = 0; k < files.gl_pathc; k++) remove(files.gl_pathv[k]);
        globfree(&files);
        rmdir(gl.gl_pathv[i]);
    }
    globfree(&gl);
}

// --resume PATH of a --shard run: PATH is a sharded checkpoint itself (it
// has manifest.json) or a run directory with some; its folder goes to out
// ("" if none: a whole-state checkpoint, resume_open)
static void resume_shards(const char *resume, char *out, size_t cap) {
    struct stat st;
    out[0] = 0;
    if (stat(resume, &st) != 0 || !S_ISDIR(st.st_mode)) return;
    snprintf(out, cap, "%s/manifest.json", resume);
    if (stat(out, &st) == 0) snprintf(out, cap, "%s", resume);
    else latest_shards(resume, out, cap);
}

// The state of one run, from the flags to the end.
typedef struct run {
    const lm_example *ex;
    run_args a;
    double t_begin; // --max-time counts from here
    int W, main_rank, files, sharded_ckpt;
    trn_ddp_desc ddp_desc;
    char ckpt_path[1024], shards_dir[1024], title[256];
    trn_safetensors ck;
    int have_ck;
    lm_dims d;
    int B, T;
    trn_tokenizer tok;
    trn_tokens tokens;
    trn_loader ld;
    int *x, *y, *skip_x, *skip_y;
    float *mb_loss; // each micro-batch's loss
    trn_model *m;
    trn_adamw opt;
    trn_adamw_desc od;
    trn_rng sample_rng;
    long long step;
    history hist;
    run_loop loop; // --skip-spikes' window and --patience's best go into the checkpoint
    FILE *logf;
    float val;
    long long val_step;
} run;

// Mean validation loss over n validation batches (fixed, so every
// evaluation sees the same tokens); with --overfit, the loss of the one
// memorized batch already in x, y. Like torch.no_grad(): no tape. Rank r
// of W takes batches r, r+W, ..., (n of them); the W means are averaged,
// which is the mean over the first n*W batches, as one rank with a W
// times larger batch would compute it.
static float run_validate(run *R) {
    double sum = 0.0;
    int n = R->a.overfit ? 1 : R->a.eval_batches;
    int grad_was = trn_no_grad(R->m); // no tape, and evaluation mode (no dropout)
    trn_eval(R->m);
    for (int i = 0; i < n; i++) {
        if (!R->a.overfit) trn_loader_val_batch(&R->ld, (int64_t)i * ddp.world + ddp.rank, R->x, R->y);
        trn_reset(R->m);
        sum += trn_item(R->m, R->ex->loss(R->x, R->y, R->B, R->T));
    }
    trn_train(R->m);
    trn_set_grad_enabled(R->m, grad_was);
    double v = sum / n;
    DDP_OK(trn_ddp_allreduce_host(&ddp, &v, 1, 1));
    R->val = (float)v;
    R->val_step = R->step;
    loop_val(&R->loop, R->logf, &R->hist, R->step, R->val);
    return R->val;
}

// Flags, ranks, the checkpoint to resume, the model's shape, the tokenizer
// and the data. Every bad input exits 2 with one line.
static void run_setup(run *R, int argc, char **argv, const lm_example *ex) {
    run_args *a = &R->a;
    memset(R, 0, sizeof *R);
    R->ex = ex;
    R->t_begin = now_s();
    R->val = -1;
    R->val_step = -1;
    args_init(a, "runs/" EX_PROG);
    if (parse_args(a, argc, argv)) { ex->usage(stdout); exit(0); }
    if (a->shard && !ex->data_parallel) die("--shard: examples/%s trains on one process (examples/gpt2 trains data-parallel)", EX_PROG);
    if (a->threads > 0) trn_set_threads(a->threads);

    // data parallelism: which rank of how many (the launcher's variables;
    // none: rank 0 of 1, no sockets). Before the model: under CUDA it picks
    // this rank's GPU. Rank 0 prints and writes every file; the other
    // ranks' stdout goes to /dev/null (their errors still reach stderr).
    if (a->shard && trn_shard_parse(a->shard, &R->ddp_desc.shard) != TRN_OK) die("--shard: %s", trn_error_reason());
    if (trn_ddp_init(&ddp, &R->ddp_desc) != TRN_OK) die("%s", trn_error_reason());
#ifdef TRN_USE_CUDA
    // this rank's GPU (already done by trn_ddp_init unless it talks TCP)
    if (trn_cuda_init(ddp.local_rank) != TRN_OK) die("%s", trn_error_reason());
#endif
    apply_precision(a->precision);
    R->W = ddp.world, R->main_rank = trn_ddp_is_main(&ddp);
    if (!R->main_rank && !freopen("/dev/null", "w", stdout)) die("rank %d: /dev/null: %s", ddp.rank, strerror(errno));
    if (R->W > 1) printf("ddp: %d ranks started by %s, communicator %s\n", R->W, ddp.env.launcher, ddp.comm.name);

    // resume: find the checkpoint, read its model config and run flags
    if (a->resume) {
        if (ex->data_parallel) resume_shards(a->resume, R->shards_dir, sizeof R->shards_dir);
        if (!R->shards_dir[0]) resume_open(a->resume, R->ckpt_path, sizeof R->ckpt_path, &R->ck);
        else if (!shards_rank0(R->shards_dir, R->ckpt_path, sizeof R->ckpt_path)) die("--resume %s: no rank-00000 file", R->shards_dir);
        else if (trn_safetensors_open(&R->ck, R->ckpt_path) != TRN_OK) die("--resume %s: %s", R->ckpt_path, trn_error_reason());
        if (st_meta_long(&R->ck, EX_PROG ".n_layer") < 0 || st_meta_long(&R->ck, "run.step") < 0)
            die("--resume %s: not a checkpoint of examples/" EX_PROG " (no " EX_PROG ".* / run.* metadata)", R->ckpt_path);
        R->have_ck = 1;
        if (a->init) { printf("note: --resume wins over --init\n"); a->init = NULL; }
        if (a->model) printf("note: --resume wins over --model %s (the checkpoint's model is resumed)\n", a->model);
        args_from_checkpoint(a, &R->ck);
    }

    // the model's shape: checkpoint > --init file > preset; the tokenizer
    // (bytes, or GPT-2 BPE), whose vocabulary must fit the model
    int batch, seq;
    float lr;
    if (!ex->configure(a, R->have_ck ? &R->ck : NULL, R->ckpt_path, &R->d, &batch, &seq, &lr))
        die("unknown --model '%s' (known: %s)", a->model, ex->models);
    if (ex->tokenizer_beside_init && !a->tokenizer && !a->bpe && (a->tokenizer = tokenizer_beside(a->init)))
        printf("tokenizer: %s (beside --init)\n", a->tokenizer);
    load_tokenizer(&R->tok, a->bpe, a->tokenizer, !R->have_ck && !a->init, ex->V, ex->Vp);
    args_defaults(a, batch, seq, lr, R->d.block_size, *ex->V);
    R->B = a->batch, R->T = a->seq;

    // data: tokens -> checked against the vocabulary -> loader
    if (a->data && !a->bpe && !a->tokenizer && *ex->V > 256) {
        // a text file cannot be read without the BPE tokenizer; a shard can
        FILE *fp = trn_check_regular(a->data) == TRN_OK ? fopen(a->data, "rb") : NULL; // (a FIFO: load_tokens says so)
        int magic = 0;
        if (fp && fread(&magic, 4, 1, fp) == 1 && magic != TRN_TOKEN_SHARD_MAGIC && magic != TRN_TOKEN_SHARD_MAGIC32) {
            fclose(fp);
            die("--data %s: a text file for a %d-token model needs its tokenizer: --tokenizer FILE (tokenizer.json) "
                "or --bpe DIR", a->data, *ex->V);
        }
        if (fp) fclose(fp);
    }
    load_tokens(&R->tokens, a->data, &R->tok, argv[0]);
    if (trn_tokens_check(R->tokens.ids, R->tokens.n, *ex->V) != TRN_OK)
        die("%s: %s (the model's vocabulary is %d; a GPT-2 shard needs --model gpt2 or --init)",
            a->data ? a->data : "data", trn_error_reason(), *ex->V);
    trn_loader_desc dd;
    memset(&dd, 0, sizeof dd);
    dd.B = R->B;
    dd.T = R->T;
    dd.seed = (uint64_t)a->seed;
    dd.no_val = a->overfit; // one memorized batch: no validation split
    if (trn_loader_init(&R->ld, R->tokens.ids, R->tokens.n, &dd) != TRN_OK)
        die("%s: %zu tokens: %s", a->data ? a->data : "data", R->tokens.n, trn_error_reason());
    args_eval_batches(a, R->ld.val_batches, R->W);
    size_t bt = (size_t)R->B * R->T;
    R->x = (int *)malloc(sizeof(int) * bt), R->y = (int *)malloc(sizeof(int) * bt);
    R->skip_x = (int *)malloc(sizeof(int) * bt), R->skip_y = (int *)malloc(sizeof(int) * bt);
    R->mb_loss = (float *)malloc(sizeof(float) * (size_t)a->grad_accum);
    if (!R->x || !R->y || !R->skip_x || !R->skip_y || !R->mb_loss) die("out of memory for a batch");
    if (a->overfit) next_batch(&R->ld, R->x, R->y, R->skip_x, R->skip_y); // the one batch to memorize (the loader stops here)
}

// The model and its optimizer: from the checkpoint, --init, or fresh;
// every rank starts from rank 0's weights. Then the files and the loop's
// extras open, and what is about to happen is said.
static void run_start(run *R) {
    run_args *a = &R->a;
    const lm_example *ex = R->ex;
    if (!(R->m = ex->create())) {
        fprintf(stderr, EX_PROG ": cannot create the model: %s\n", trn_error_reason());
        exit(1);
    }
    *ex->recompute = a->recompute;
    R->m->attention_materialized = attention_materialized(a);
    memset(&R->od, 0, sizeof R->od);
    R->od.lr = a->lr;
    R->od.beta1 = 0.9f;
    R->od.beta2 = ex->beta2;
    R->od.eps = 1e-8f;
    R->od.weight_decay = a->weight_decay;
    R->od.no_weight_decay = a->weight_decay == 0.0f;
    trn_adamw_init(&R->opt, &R->od);
    trn_rng_seed(&R->sample_rng, (uint64_t)a->seed ^ 0x5A4D504C45ull);
    loop_init(&R->loop, a, R->t_begin);

    int attached = 0;
    if (R->have_ck) {
        trn_safetensors_close(&R->ck);
        trn_meta meta;
        if (R->shards_dir[0]) { // every rank reads the slices it keeps
            DDP_OK(trn_ddp_attach(&ddp, R->m));
            attached = 1;
            if (trn_ddp_checkpoint_load_sharded(&ddp, R->shards_dir, R->m, &R->opt, &meta) != TRN_OK)
                die("--resume %s: %s", R->shards_dir, trn_error_reason());
            snprintf(R->ckpt_path, sizeof R->ckpt_path, "%s", R->shards_dir);
        } else if (trn_checkpoint_load(R->ckpt_path, R->m, &R->opt, &meta) != TRN_OK)
            die("--resume %s: %s", R->ckpt_path, trn_error_reason());
        // the load restored the AdamW settings saved in the file; this run's
        // (the checkpoint's, unless a flag given again replaced them above)
        // are what the next steps use and what the next checkpoint records
        R->opt.desc = trn_adamw_defaults(&R->od);
        if (trn_ddp_meta_check(&ddp, &meta, R->ckpt_path) != TRN_OK) die("--resume: %s", trn_error_reason());
        R->step = run_state_from_meta(&meta, R->ckpt_path, &R->sample_rng, &R->ld);
        loop_resume(&R->loop, &meta);
        printf("resumed from %s at step %lld\n", R->ckpt_path, R->step);
        if (a->log && R->main_rank) log_truncate_and_read(a->log, R->step, &R->hist);
    } else {
        ex->init(a->init, (uint64_t)a->seed);
    }
    if (R->step > a->steps) die("--steps %lld: the checkpoint is already at step %lld", a->steps, R->step);
    // --shard (several ranks): no rank holds the whole state; every rank writes its slice
    R->sharded_ckpt = R->W > 1 && R->ddp_desc.shard != TRN_SHARD_NONE;
    if (R->have_ck && !R->shards_dir[0] && R->sharded_ckpt)
        die("--resume %s: a whole-state checkpoint; a --shard %s run resumes from a sharded one (ckpt_*.shards)",
            R->ckpt_path, a->shard);
    if (!attached) DDP_OK(trn_ddp_attach(&ddp, R->m)); // every rank starts from rank 0's weights

    ex->describe();
    printf("data: %zu tokens (%zu train, %zu validation), %s tokenizer; batch %d x %d tokens x %d accumulation\n",
           R->tokens.n, R->ld.n_train, R->ld.n_val, a->tokenizer ? "tokenizer.json" : a->bpe ? "GPT-2 BPE" : "byte", R->B, R->T, a->grad_accum);
    printf("train: %lld steps, lr %g -> %g (warmup %d, cosine), AdamW wd %g, clip %g, seed %lld, %d threads\n",
           a->steps, a->lr, a->min_lr, a->warmup, a->weight_decay, a->clip, a->seed, trn_get_threads());
    if (R->W > 1) printf("ddp: batch %d x %d ranks = %d sequences per micro-batch\n", R->B, R->W, R->B * R->W);
    R->files = R->main_rank && !a->fast_dev_run; // --fast-dev-run writes nothing
    if (R->files && trn_mkdirs(a->out) != TRN_OK) die("--out %s: %s", a->out, trn_error_reason());
    if (R->main_rank && a->log && !(R->logf = log_open(a->log, R->have_ck))) die("--log %s", a->log);
    loop_open(&R->loop, a, R->m, R->step, R->have_ck, R->main_rank); // progress and ETA, CSV, TensorBoard, profile
    snprintf(R->title, sizeof R->title, "examples/" EX_PROG ": L=%d C=%d, %s, batch %dx%d", R->d.n_layer, R->d.n_embd,
             a->data ? a->data : "the kit's text", R->B, R->T);
}

// A checkpoint of everything the next step depends on: weights, AdamW
// (the file's tensors), step, RNG, data position, flags (the metadata).
static void run_checkpoint(run *R) {
    run_args *a = &R->a;
    trn_meta meta;
    memset(&meta, 0, sizeof meta);
    R->ex->to_meta(&meta);
    run_to_meta(a, &meta);
    // the world size (trn_ddp_meta_set's key): resume with another is
    // refused. Absent = 1 rank, so W = 1 adds nothing.
    if (R->sharded_ckpt) trn_ddp_meta_set(&ddp, &meta); // world size and ZeRO: must match on resume
    else if (R->W > 1) trn_meta_set_u64(&meta, "ddp.world_size", (uint64_t)R->W);
    run_state_to_meta(&meta, R->step, &R->sample_rng, &R->ld);
    loop_to_meta(&R->loop, a, &meta, R->val_step == R->step, R->val);
    if (R->sharded_ckpt) { // every rank its slice, rank 0 the manifest last
        char path[1200];
        trn_progress_break(&R->loop.prog);
        snprintf(path, sizeof path, "%s/ckpt_%08lld.shards", a->out, R->step);
        DDP_OK(trn_ddp_checkpoint_save_sharded(&ddp, path, R->m, &R->opt, &meta));
        if (R->main_rank) prune_shards(a->out, a->keep);
        printf("checkpoint %s\n", path);
    } else {
        loop_save(&R->loop, a, R->step, R->m, &R->opt, &meta, R->val_step == R->step);
    }
}

// The training loop: the step of train.h, with K micro-batches of gradient
// accumulation, the mean gradient over W ranks, and the loop's extras.
static void run_train(run *R) {
    run_args *a = &R->a;
    trn_model *m = R->m;
    const char *stop = NULL; // why the loop ended early (--patience, --max-time)
    // warmup, then a cosine from lr to min_lr at the last step
    const trn_schedule sched = {TRN_SCHEDULE_COSINE, a->warmup, a->steps, a->lr, a->min_lr, 0};
    if (R->step == 0 && a->eval_every > 0 && a->steps > 0) trn_early_stop_update(&R->loop.early, 0, run_validate(R));
    while (R->step < a->steps) {
        double t0 = now_s();
        float lr = trn_schedule_lr(&sched, R->step);
        trn_zero_grad(m);
        for (int k = 0; k < a->grad_accum; k++) {
            if (!a->overfit) next_batch(&R->ld, R->x, R->y, R->skip_x, R->skip_y);
            trn_reset(m);
            trn_tensor *l = R->ex->loss(R->x, R->y, R->B, R->T);
            trn_item_async(m, l, &R->mb_loss[k]);          // lands at trn_sync: the GPU does not stop here
            trn_ddp_set_sync(&ddp, k == a->grad_accum - 1); // all-reduce during the last backward only
            trn_backward(m, l);                             // grads += d(this micro-batch's mean loss)
        }
        DDP_OK(trn_ddp_allreduce_grads(&ddp, m)); // the mean gradient over the ranks
        if (a->grad_accum > 1) trn_scale_grads(m, 1.0f / (float)a->grad_accum); // the mean over micro-batches
        float norm, loss = 0.0f;
        if (R->W == 1) trn_clip_grad_norm_async(m, a->clip, &norm); // on the GPU, applied inside AdamW
        else DDP_OK(trn_ddp_clip_grad_norm(&ddp, m, a->clip, &norm));
        // --skip-spikes decides from this step's loss and norm, so it waits
        // for them before the update; otherwise the update is queued first
        // and the step's one wait for the GPU comes after it
        if (a->skip_spikes > 0) trn_sync(m);
        else DDP_OK(trn_ddp_adamw_step(&ddp, &R->opt, m, lr)); // the same step on every rank
        trn_sync(m); // the losses and the norm have landed
        for (int k = 0; k < a->grad_accum; k++) loss += R->mb_loss[k] / (float)a->grad_accum;
        double mean_loss = loss; // the loss logged: the mean over the ranks
        DDP_OK(trn_ddp_allreduce_host(&ddp, &mean_loss, 1, 1));
        loss = (float)mean_loss;
        // --skip-spikes: the same loss and norm on every rank, so the same decision
        int skipped = a->skip_spikes > 0 && trn_spike_guard_check(&R->loop.guard, loss, norm);
        if (a->skip_spikes > 0 && !skipped) {
            DDP_OK(trn_ddp_adamw_step(&ddp, &R->opt, m, lr));
            trn_sync(m);
        }
        R->step++;
        step_stats st = {R->step, loss, lr, norm, 1e3 * (now_s() - t0), 0, 0, skipped};
        st.tps = (double)R->B * R->T * a->grad_accum * R->W / (st.ms / 1e3);
        st.mem = trn_ledger_total(TRN_HOST) + trn_ledger_total(TRN_DEVICE);
        loop_step(&R->loop, a, R->logf, &R->hist, &st); // the step's line (+ ETA), JSONL, TensorBoard, plot
        int force_ckpt = 0; // a stop (--patience, --max-time) leaves a checkpoint to resume from
        if (a->eval_every > 0 && (R->step % a->eval_every == 0 || R->step == a->steps)) {
            run_validate(R);
            if ((stop = loop_validated(&R->loop, a, &R->hist, R->title, R->step, R->val, R->files))) force_ckpt = 1;
        }
        if (R->step < a->steps) { // every rank stops at the same step: any rank's clock or Ctrl-C decides
            double over[2] = {loop_over_time(&R->loop, a), loop_interrupted()};
            if (R->W > 1) DDP_OK(trn_ddp_allreduce_host(&ddp, over, 2, 0));
            if (over[1] > 0) stop = LOOP_CTRL_C, force_ckpt = 1;
            else if (over[0] > 0) stop = "--max-time", force_ckpt = 1;
        }
        loop_step_end(&R->loop, &st, R->val_step == R->step ? R->val : NAN); // the CSV row
        if ((R->files || (R->sharded_ckpt && !a->fast_dev_run)) &&
            (force_ckpt || (a->ckpt_every > 0 && (R->step % a->ckpt_every == 0 || R->step == a->steps))))
            run_checkpoint(R);
        if (stop) {
            loop_stopped(&R->loop, a, R->step, stop);
            break;
        }
    }
    loop_finish(&R->loop, a); // the last async checkpoint on disk, the profile
}

// The end: a final validation, the plot, the weights, the logits
// (--dump-logits), a sample; then everything is given back.
static void run_finish(run *R) {
    run_args *a = &R->a;
    const lm_example *ex = R->ex;
    char path[1200];
    if (R->val_step != R->step || a->eval_every == 0) run_validate(R);
    loop_close(&R->loop, R->step, R->val); // the CSV, TensorBoard; what the run did
    if (R->W > 1) DDP_OK(trn_ddp_print_memory(&ddp, "memory per rank (the ledger)"));
    DDP_OK(trn_ddp_unshard(&ddp, R->m)); // FSDP: whole weights again, to save and sample on rank 0
    if (a->fast_dev_run) printf("fast-dev-run: 1 training step and 1 validation batch ran, no files written\n");
    if (R->files) {
        snprintf(path, sizeof path, "%s/loss.svg", a->out);
        write_plot(path, &R->hist, R->title);
        trn_meta meta;
        memset(&meta, 0, sizeof meta);
        ex->to_meta(&meta);
        snprintf(path, sizeof path, "%s/model.safetensors", a->out);
        CHECK_OK(trn_safetensors_save(path, R->m, &meta));
        printf("wrote %s and %s/loss.svg\n", path, a->out);
    }
    trn_ledger_print("memory: what the kit allocated (peak = the step's high-water mark)");
    if (a->dump_logits && R->main_rank) { // the logits of validation batch 0 (--overfit: its one batch)
        if (!a->overfit) trn_loader_val_batch(&R->ld, 0, R->x, R->y);
        int grad_was = trn_no_grad(R->m);
        trn_reset(R->m);
        dump_logits(a->dump_logits, R->m, ex->logits(ex->model, R->x, R->B, R->T));
        trn_set_grad_enabled(R->m, grad_was);
    }
    if (a->sample > 0 && R->main_rank) {
        trn_kv_cache kv; // keys and values of the context: one position per new token
        CHECK_OK(trn_kv_cache_init(&kv, R->m, R->d.n_layer, 1, R->T, R->d.kv_heads, R->d.head_dim));
        sample_run(a, R->m, ex->logits, ex->model, *ex->V, *ex->Vp, &R->tok, R->T, &R->sample_rng,
                   ex->logits_cached, &kv);
        trn_kv_cache_free(&kv);
    }
    log_close(R->logf);
    DDP_OK(trn_ddp_barrier(&ddp)); // no rank leaves while another may still need it
    trn_ddp_free(&ddp);
    free(R->x), free(R->y), free(R->skip_x), free(R->skip_y), free(R->mb_loss);
    free(R->hist.step), free(R->hist.loss), free(R->hist.vstep), free(R->hist.vloss);
    trn_loader_free(&R->ld);
    trn_tokens_free(&R->tokens);
    trn_tokenizer_free(&R->tok);
    trn_adamw_free(&R->opt);
    ex->free();
}

// A whole run of a language model: what examples/gpt2 and examples/llama
// do from their flags to their sample.
static int run_main(int argc, char **argv, const lm_example *ex) {
    static run R; // big (paths, the state of the loop): not on the stack
    trn_omp_wait_passive(argv); // OpenMP threads sleep when idle (unless OMP_WAIT_POLICY is set)
    malloc_return_large_blocks(); // the OS's RSS follows the ledger
    run_setup(&R, argc, argv, ex);
    run_start(&R);
    run_train(&R);
    run_finish(&R);
    return 0;
}
#endif // TRAIN_NCCL_H_INCLUDED

#endif // EXAMPLES_COMMON_H
