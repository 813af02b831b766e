// vit - a small Vision Transformer trained from image files on disk.
//
// Shows that train.h is a kit, not one model: the ops GPT-2 uses (linear,
// layernorm, attention, gelu, embedding, cross-entropy) make an image
// classifier when attention is not causal. Images are PNG/JPG/BMP/... files
// in one folder per class, read with stb_image (Debian's libstb-dev), the
// layout torchvision's ImageFolder reads:
//
//   DATA/train/<class>/*.png     DATA/test/<class>/*.png
//
// Run it on Fashion-MNIST (Debian's dataset-fashion-mnist), written out as PNGs:
//
//   ./build.sh
//   tools/fashion_mnist_png runs/fashion          # 70,000 PNG files
//   examples/vit --data runs/fashion --out runs/vit
//
// What happens, top to bottom:
//   1. >>images  list the class folders (sorted names -> labels 0..K-1), load
//      every image with stb_image on all threads, convert it to the model's
//      channels, resize it (bilinear) to --size, keep it as bytes. Files that
//      are not images, are truncated, or cannot be read are skipped and
//      counted, never fatal.
//   2. >>model   patches (linear) + learned positions -> [pre-LN block] x depth
//      -> layernorm -> mean over patches -> linear head -> cross-entropy.
//      The MLP uses ReLU by default (--act gelu for the paper's GELU, slower).
//   3. >>train   AdamW, linear warmup + cosine decay, gradient clipping; the
//      test split is evaluated after every epoch; a checkpoint is written
//      after every epoch and --resume continues from one.
//   4. >>report  confusion matrix, and a PNG grid of test images labelled
//      with predicted and true class (drawn with a tiny built-in font).
//
// The lines "train_acc X", "test_acc X", "bad_images N" at the end are for
// scripts (tests/test_vit.sh reads them).
//
// build: -lstb
// requires: have_lib libstb-dev stb/stb_image.h stbi_load -lstb && have_lib libstb-dev stb/stb_image_write.h stbi_write_png -lstb
#define TRAIN_IMPLEMENTATION
#include "train.h"
#include "extras/train_loop.h" // progress/ETA, CSV, TensorBoard, the profile table
#include "extras/train_run.h"  // run directories: keep-K, resume, async saves

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <stb/stb_image.h>
#include <stb/stb_image_write.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// ===========================================================================
// >>images: an ImageFolder loader over stb_image
//
// Every image ends up as size*size*channels bytes (HWC, row-major), the
// format stb_image itself returns. Normalization to (x/255 - mean)/std
// happens when a batch is assembled, so 70,000 28x28 images take 55 MB,
// not 220 MB of floats.
// ===========================================================================

typedef struct string_list {
    char **s;
    int n, cap;
} string_list;

static int strings_push(string_list *l, const char *s) {
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 64;
        char **ns = (char **)realloc(l->s, (size_t)cap * sizeof *ns);
        if (!ns) return -1;
        l->s = ns;
        l->cap = cap;
    }
    size_t n = strlen(s) + 1;
    l->s[l->n] = (char *)malloc(n);
    if (!l->s[l->n]) return -1;
    memcpy(l->s[l->n++], s, n);
    return 0;
}

static void strings_free(string_list *l) {
    for (int i = 0; i < l->n; i++) free(l->s[i]);
    free(l->s);
    memset(l, 0, sizeof *l);
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

// the extensions stb_image can decode (ImageFolder likewise filters by extension)
static int is_image_name(const char *name) {
    static const char *ext[] = {"png", "jpg", "jpeg", "bmp", "gif", "tga",
                                "pgm", "ppm", "pnm", "psd", "hdr", "pic"};
    const char *dot = strrchr(name, '.');
    if (!dot) return 0;
    for (size_t i = 0; i < sizeof ext / sizeof ext[0]; i++) {
        const char *a = dot + 1, *b = ext[i];
        while (*a && *b && tolower((unsigned char)*a) == *b) a++, b++;
        if (!*a && !*b) return 1;
    }
    return 0;
}

// names in dir (not starting with '.'), sorted: subfolders when want_dirs,
// else regular files with an image extension
static trn_result list_dir(const char *dir, int want_dirs, string_list *out) {
    DIR *d = opendir(dir);
    if (!d) return trn_fail(TRN_ERR_IO, "open folder %s: %s", dir, strerror(errno));
    struct dirent *e;
    char path[4096];
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        if (!want_dirs && !is_image_name(e->d_name)) continue;
        if (snprintf(path, sizeof path, "%s/%s", dir, e->d_name) >= (int)sizeof path) continue;
        struct stat st;
        if (stat(path, &st) != 0) continue;          // a dangling link: not ours
        if (want_dirs ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode)) continue;
        if (strings_push(out, e->d_name) != 0) {
            closedir(d);
            return trn_fail(TRN_ERR_NOMEM, "listing %s: out of memory", dir);
        }
    }
    closedir(d);
    qsort(out->s, (size_t)out->n, sizeof *out->s, cmp_str);
    return TRN_OK;
}

typedef struct image_set {
    int n;               // images kept
    int size, channels;  // every image: size x size x channels bytes (HWC)
    unsigned char *pix;  // (n, size, size, channels)
    int *labels;         // (n), index into the class list
    int n_bad;           // files skipped: not an image, truncated, unreadable
    int n_converted;     // kept, but converted gray<->RGB or alpha dropped
} image_set;

static void image_set_free(image_set *s) {
    free(s->pix);
    free(s->labels);
    memset(s, 0, sizeof *s);
}

// Bilinear resize of src (h, w, ch bytes) to dst (size, size, ch), pixel
// centers aligned (the "align_corners=False" convention): output pixel x
// samples source position (x + 0.5) * w / size - 0.5. Shrinking by a large
// factor aliases (no area filter); fine for icons, blurry photos want a
// proper low-pass first.
static void resize_bilinear(unsigned char *dst, int size, const unsigned char *src, int w,
                            int h, int ch) {
    if (w == size && h == size) { memcpy(dst, src, (size_t)size * size * ch); return; }
    for (int y = 0; y < size; y++) {
        float sy = ((float)y + 0.5f) * (float)h / (float)size - 0.5f;
        if (sy < 0) sy = 0;
        int y0 = (int)sy, y1 = y0 + 1 < h ? y0 + 1 : h - 1;
        float fy = sy - (float)y0;
        for (int x = 0; x < size; x++) {
            float sx = ((float)x + 0.5f) * (float)w / (float)size - 0.5f;
            if (sx < 0) sx = 0;
            int x0 = (int)sx, x1 = x0 + 1 < w ? x0 + 1 : w - 1;
            float fx = sx - (float)x0;
            for (int c = 0; c < ch; c++) {
                float a = src[((size_t)y0 * w + x0) * ch + c], b = src[((size_t)y0 * w + x1) * ch + c];
                float d = src[((size_t)y1 * w + x0) * ch + c], e = src[((size_t)y1 * w + x1) * ch + c];
                float v = (1 - fy) * ((1 - fx) * a + fx * b) + fy * ((1 - fx) * d + fx * e);
                dst[((size_t)y * size + x) * ch + c] = (unsigned char)(v + 0.5f);
            }
        }
    }
}

enum { LOAD_OK = 0, LOAD_CONVERTED = 1, LOAD_BAD = 2 };

// Decode one file into dst (size, size, channels). stb_image reports how many
// channels the file has (1 gray, 2 gray+alpha, 3 RGB, 4 RGBA); we convert to
// the model's: alpha is dropped, gray is copied to R=G=B, RGB becomes gray by
// the ITU-R 601 luma weights. With strict set, a gray file for an RGB model
// (or the reverse) is skipped instead, as a wrong channel count.
static int load_one(const char *path, unsigned char *dst, int size, int channels, int strict,
                    const char **reason, int *file_channels) {
    int w = 0, h = 0, n = 0;
    unsigned char *img = stbi_load(path, &w, &h, &n, 0);
    *file_channels = n;
    if (!img) {
        // stb_image's reasons are terse ("outofdata" = truncated, "unknown
        // image type" = not an image it knows); say which file problem it was
        struct stat st;
        const char *why = stbi_failure_reason();  // thread-local in stb_image >= 2.26
        if (stat(path, &st) != 0) *reason = "cannot open";
        else if (st.st_size == 0) *reason = "empty file";
        else if (why && !strcmp(why, "outofdata")) *reason = "truncated (stb_image: outofdata)";
        else if (why && !strcmp(why, "unknown image type")) *reason = "not an image (stb_image: unknown image type)";
        else *reason = why ? why : "cannot decode";
        return LOAD_BAD;
    }
    if (w <= 0 || h <= 0 || n < 1 || n > 4) {
        stbi_image_free(img);
        *reason = "bad dimensions or channel count";
        return LOAD_BAD;
    }
    int file_gray = n <= 2, model_gray = channels == 1;
    if (strict && file_gray != model_gray) {
        stbi_image_free(img);
        *reason = "wrong channel count";
        return LOAD_BAD;
    }
    int status = (n == channels) ? LOAD_OK : LOAD_CONVERTED;
    unsigned char *conv = img;
    if (n != channels) {
        conv = (unsigned char *)malloc((size_t)w * h * channels);
        if (!conv) { stbi_image_free(img); *reason = "out of memory"; return LOAD_BAD; }
        for (size_t i = 0; i < (size_t)w * h; i++) {
            const unsigned char *p = img + i * n;
            if (channels == 1) {
                conv[i] = file_gray ? p[0]
                                    : (unsigned char)(0.299f * p[0] + 0.587f * p[1] + 0.114f * p[2] + 0.5f);
            } else {
                for (int c = 0; c < 3; c++) conv[i * 3 + c] = file_gray ? p[0] : p[c];
            }
        }
    }
    resize_bilinear(dst, size, conv, w, h, channels);
    if (conv != img) free(conv);
    stbi_image_free(img);
    return status;
}

// Load ROOT/<class>/* for every class in classes (sorted names; the label is
// the index). When classes is empty it is filled from ROOT's subfolders.
// limit > 0 keeps the first `limit` files taken round-robin over the classes
// (file 0 of every class, then file 1, ...), so a quick run still sees every
// class. channels 0 = that of the first file stb_image can read.
static trn_result image_folder_load(const char *root, string_list *classes, int size,
                                    int *channels, int limit, int strict, image_set *out) {
    memset(out, 0, sizeof *out);
    trn_result r = TRN_OK;
    string_list *files = NULL;   // per class: file names, sorted
    char **paths = NULL;         // (n_take) full paths, in load order
    int *label = NULL, *status = NULL, *file_ch = NULL;
    const char **reason = NULL;
    int n_take = 0, total = 0, most = 0;
    char path[4096];

    if (classes->n == 0) {
        if ((r = list_dir(root, 1, classes)) != TRN_OK) return r;
        if (classes->n < 2)
            return trn_fail(TRN_ERR_FORMAT, "%s has %d class folders; need at least 2 "
                            "(layout: %s/<class>/<image>.png)", root, classes->n, root);
    } else {  // a second split must not have classes the first one lacks
        string_list here = {0};
        if ((r = list_dir(root, 1, &here)) != TRN_OK) return r;
        for (int i = 0; i < here.n && r == TRN_OK; i++)
            if (!bsearch(&here.s[i], classes->s, (size_t)classes->n, sizeof(char *), cmp_str))
                r = trn_fail(TRN_ERR_MISMATCH, "%s/%s: a class the training folder does not have",
                             root, here.s[i]);
        strings_free(&here);
        if (r != TRN_OK) return r;
    }

    // every file, class by class
    files = (string_list *)calloc((size_t)classes->n, sizeof *files);
    if (!files) { r = trn_fail(TRN_ERR_NOMEM, "out of memory"); goto done; }
    for (int c = 0; c < classes->n; c++) {
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", root, classes->s[c]);
        if (stat(path, &st) != 0) continue;  // test/ may lack a class: fine
        if ((r = list_dir(path, 0, &files[c])) != TRN_OK) goto done;
        total += files[c].n;
        if (files[c].n > most) most = files[c].n;
    }
    if (total == 0) { r = trn_fail(TRN_ERR_FORMAT, "%s: no image files in its class folders", root); goto done; }

    // the order we load in: class-major, or round-robin when limited
    n_take = (limit > 0 && limit < total) ? limit : total;
    paths = (char **)calloc((size_t)n_take, sizeof *paths);
    label = (int *)malloc((size_t)n_take * sizeof *label);
    status = (int *)malloc((size_t)n_take * sizeof *status);
    file_ch = (int *)malloc((size_t)n_take * sizeof *file_ch);
    reason = (const char **)calloc((size_t)n_take, sizeof *reason);
    if (!paths || !label || !status || !file_ch || !reason) { r = trn_fail(TRN_ERR_NOMEM, "out of memory"); goto done; }
    {
        int k = 0;
        for (int i = 0; i < most && k < n_take; i++)          // round-robin
            for (int c = 0; c < classes->n && k < n_take; c++)
                if (i < files[c].n) {
                    snprintf(path, sizeof path, "%s/%s/%s", root, classes->s[c], files[c].s[i]);
                    if (!(paths[k] = strdup(path))) { r = trn_fail(TRN_ERR_NOMEM, "out of memory"); goto done; }
                    label[k++] = c;
                }
    }

    // channels: the first file whose header stb_image can read decides
    if (*channels == 0) {
        for (int k = 0; k < n_take && *channels == 0; k++) {
            int w, h, n;
            if (stbi_info(paths[k], &w, &h, &n)) *channels = n <= 2 ? 1 : 3;
        }
        if (*channels == 0) { r = trn_fail(TRN_ERR_FORMAT, "%s: not one readable image", root); goto done; }
    }
    int C = *channels;
    size_t img_bytes = (size_t)size * size * C;
    out->pix = (unsigned char *)malloc((size_t)n_take * img_bytes);
    out->labels = (int *)malloc((size_t)n_take * sizeof(int));
    if (!out->pix || !out->labels) {
        r = trn_fail(TRN_ERR_NOMEM, "%d images of %zu bytes: out of memory", n_take, img_bytes);
        goto done;
    }

    // decode on every thread: files are independent, stb_image is reentrant
    #pragma omp parallel for schedule(dynamic, 64)
    for (int k = 0; k < n_take; k++)
        status[k] = load_one(paths[k], out->pix + (size_t)k * img_bytes, size, C, strict,
                             &reason[k], &file_ch[k]);

    // compact: keep the good ones in order, report the first few bad ones
    int kept = 0, shown = 0;
    for (int k = 0; k < n_take; k++) {
        if (status[k] == LOAD_BAD) {
            if (shown++ < 5) {
                if (file_ch[k] > 0)
                    fprintf(stderr, "  skip %s: %s (%d channel%s, model takes %d)\n", paths[k],
                            reason[k], file_ch[k], file_ch[k] == 1 ? "" : "s", C);
                else
                    fprintf(stderr, "  skip %s: %s\n", paths[k], reason[k]);
            }
            out->n_bad++;
            continue;
        }
        if (status[k] == LOAD_CONVERTED) out->n_converted++;
        if (kept != k)
            memmove(out->pix + (size_t)kept * img_bytes, out->pix + (size_t)k * img_bytes, img_bytes);
        out->labels[kept++] = label[k];
    }
    if (out->n_bad > 5) fprintf(stderr, "  ... and %d more\n", out->n_bad - 5);
    if (out->n_bad)
        fprintf(stderr, "%s: skipped %d bad image file%s of %d\n", root, out->n_bad,
                out->n_bad == 1 ? "" : "s", n_take);
    out->n = kept;
    out->size = size;
    out->channels = C;
    if (kept == 0) r = trn_fail(TRN_ERR_FORMAT, "%s: none of its %d image files could be read", root, n_take);

done:
    if (paths) for (int k = 0; k < n_take; k++) free(paths[k]);
    free(paths); free(label); free(status); free(file_ch); free(reason);
    if (files) for (int c = 0; c < classes->n; c++) strings_free(&files[c]);
    free(files);
    if (r != TRN_OK) image_set_free(out);
    return r;
}

// per-channel mean and std of the pixels (scaled to [0,1]) of a whole set;
// the inputs are then (x - mean) / std, as torchvision's Normalize does
static void image_set_stats(const image_set *s, float *mean, float *std) {
    int C = s->channels;
    size_t per = (size_t)s->size * s->size;
    for (int c = 0; c < C; c++) {
        double sum = 0, sq = 0;
        for (int i = 0; i < s->n; i++) {
            const unsigned char *p = s->pix + (size_t)i * per * C + c;
            for (size_t j = 0; j < per; j++) {
                double v = p[j * C] / 255.0;
                sum += v;
                sq += v * v;
            }
        }
        double n = (double)s->n * (double)per, m = sum / n, var = sq / n - m * m;
        mean[c] = (float)m;
        std[c] = (float)(var > 1e-12 ? sqrt(var) : 1.0);
    }
}

// images idx[0..B) of s -> normalized floats (B, size, size, channels)
static void make_batch(float *x, int *y, const image_set *s, const int *idx, int B,
                       const float *mean, const float *std) {
    int C = s->channels;
    size_t per = (size_t)s->size * s->size * C;
    for (int b = 0; b < B; b++) {
        const unsigned char *p = s->pix + (size_t)idx[b] * per;
        for (size_t j = 0; j < per; j++) {
            int c = (int)(j % (size_t)C);
            x[(size_t)b * per + j] = (p[j] / 255.0f - mean[c]) / std[c];
        }
        y[b] = s->labels[idx[b]];
    }
}

// ===========================================================================
// >>model: a Vision Transformer (Dosovitskiy et al. 2020, "An Image is Worth
// 16x16 Words"), pre-LN like GPT-2, mean pooling instead of a class token.
//
//   image (B,H,W,Ch) --patchify--> (B,T,P*P*Ch)       T = (H/P)*(W/P) patches
//   --linear--> (B,T,D) + pos[0..T) (B,T,D)           learned positions
//   block x depth:  x = x + proj(attn(qkv(ln1(x))))   attention NOT causal:
//                   x = x + fc2(act(fc1(ln2(x))))     every patch sees every patch
//                                                     (fc1: D -> mlp*D, fc2: back to D)
//   --ln_f--> --mean over T--> (B,D) --head--> (B,K) logits --> cross-entropy
// ===========================================================================

typedef struct vit_config {
    int size, channels, patch;  // input size x size x channels, patch side
    int dim, depth, heads;      // width, blocks, attention heads
    int mlp;                    // hidden width of the MLP = mlp * dim
    int relu;                   // MLP activation: 0 GELU (as in ViT), 1 ReLU
    int n_classes;
} vit_config;

typedef struct vit_block {
    trn_tensor *ln1_w, *ln1_b, *qkv_w, *qkv_b, *proj_w, *proj_b;
    trn_tensor *ln2_w, *ln2_b, *fc1_w, *fc1_b, *fc2_w, *fc2_b;
} vit_block;

typedef struct vit {
    vit_config cfg;
    int T, patch_dim;           // tokens per image, floats per patch
    trn_model model;
    trn_tensor *patch_w, *patch_b, *pos;
    vit_block *blocks;
    trn_tensor *lnf_w, *lnf_b, *head_w, *head_b;
    int *pos_ids;               // (max_batch, T): 0..T-1 per image
    int max_batch;
} vit;

// weights are (out, in), as trn_linear expects
static trn_result vit_init(vit *v, const vit_config *cfg, int max_batch, uint64_t seed) {
    memset(v, 0, sizeof *v);
    v->cfg = *cfg;
    int D = cfg->dim, P = cfg->patch, H = cfg->mlp * cfg->dim;
    v->T = (cfg->size / P) * (cfg->size / P);
    v->patch_dim = P * P * cfg->channels;
    trn_result r = trn_model_init(&v->model, NULL);
    if (r != TRN_OK) return r;
    trn_model *m = &v->model;
    char name[64];
    v->patch_w = trn_param2(m, "patch_embed.weight", D, v->patch_dim);
    v->patch_b = trn_param1(m, "patch_embed.bias", D);
    v->pos = trn_param2(m, "pos_embed", v->T, D);
    v->blocks = (vit_block *)calloc((size_t)cfg->depth, sizeof *v->blocks);
    if (!v->blocks) return trn_fail(TRN_ERR_NOMEM, "out of memory");
    for (int l = 0; l < cfg->depth; l++) {
        vit_block *b = &v->blocks[l];
#define P2(field, what, d0, d1) (snprintf(name, sizeof name, "blocks.%d.%s", l, what), b->field = trn_param2(m, name, d0, d1))
#define P1(field, what, d0) (snprintf(name, sizeof name, "blocks.%d.%s", l, what), b->field = trn_param1(m, name, d0))
        P1(ln1_w, "norm1.weight", D);         P1(ln1_b, "norm1.bias", D);
        P2(qkv_w, "attn.qkv.weight", 3 * D, D); P1(qkv_b, "attn.qkv.bias", 3 * D);
        P2(proj_w, "attn.proj.weight", D, D);  P1(proj_b, "attn.proj.bias", D);
        P1(ln2_w, "norm2.weight", D);         P1(ln2_b, "norm2.bias", D);
        P2(fc1_w, "mlp.fc1.weight", H, D);    P1(fc1_b, "mlp.fc1.bias", H);
        P2(fc2_w, "mlp.fc2.weight", D, H);    P1(fc2_b, "mlp.fc2.bias", D);
#undef P2
#undef P1
    }
    v->lnf_w = trn_param1(m, "norm.weight", D);
    v->lnf_b = trn_param1(m, "norm.bias", D);
    v->head_w = trn_param2(m, "head.weight", cfg->n_classes, D);
    v->head_b = trn_param1(m, "head.bias", cfg->n_classes);
    if ((r = trn_model_alloc(m)) != TRN_OK) return r;

    // init: N(0, 0.02) for matrices and positions, zero biases, unit layernorm
    // gains; the two projections that write into the residual stream are
    // scaled by 1/sqrt(2*depth) so the stream's variance does not grow with depth
    trn_rng rng;
    trn_rng_seed(&rng, seed);
    float resid_std = 0.02f / sqrtf(2.0f * (float)cfg->depth);
    trn_init_normal(m, v->patch_w, 0, 0.02f, &rng);
    trn_init_normal(m, v->pos, 0, 0.02f, &rng);
    for (int l = 0; l < cfg->depth; l++) {
        vit_block *b = &v->blocks[l];
        trn_init_const(m, b->ln1_w, 1);
        trn_init_const(m, b->ln2_w, 1);
        trn_init_normal(m, b->qkv_w, 0, 0.02f, &rng);
        trn_init_normal(m, b->proj_w, 0, resid_std, &rng);
        trn_init_normal(m, b->fc1_w, 0, 0.02f, &rng);
        trn_init_normal(m, b->fc2_w, 0, resid_std, &rng);
    }
    trn_init_const(m, v->lnf_w, 1);
    trn_init_normal(m, v->head_w, 0, 0.02f, &rng);

    v->max_batch = max_batch;
    v->pos_ids = (int *)malloc((size_t)max_batch * v->T * sizeof(int));
    if (!v->pos_ids) return trn_fail(TRN_ERR_NOMEM, "out of memory");
    for (int i = 0; i < max_batch * v->T; i++) v->pos_ids[i] = i % v->T;
    return TRN_OK;
}

static void vit_free(vit *v) {
    trn_model_free(&v->model);
    free(v->blocks);
    free(v->pos_ids);
    memset(v, 0, sizeof *v);
}

// patches (B,T,patch_dim) on the host -> logits (B,K) on the tape
static trn_tensor *vit_forward(vit *v, const float *patches, int B) {
    trn_model *m = &v->model;
    int shape[3] = {B, v->T, v->patch_dim};
    trn_tensor *x = trn_input(m, "patches", 3, shape, patches);
    x = trn_linear(m, x, v->patch_w, v->patch_b);                      // (B,T,D)
    // positions: an embedding lookup of ids 0..T-1 for every image gives a
    // (B,T,D) tensor whose gradient is scatter-added back into pos (T,D),
    // the same trick GPT-2 uses for its position table
    x = trn_add(m, x, trn_embedding(m, v->pos, v->pos_ids, B, v->T));
    for (int l = 0; l < v->cfg.depth; l++) {
        vit_block *b = &v->blocks[l];
        trn_tensor *h = trn_layernorm(m, x, b->ln1_w, b->ln1_b);
        h = trn_linear(m, h, b->qkv_w, b->qkv_b);                       // (B,T,3D)
        h = trn_attention(m, h, v->cfg.heads, /*causal=*/0);            // (B,T,D)
        x = trn_add(m, x, trn_linear(m, h, b->proj_w, b->proj_b));
        h = trn_layernorm(m, x, b->ln2_w, b->ln2_b);
        h = trn_linear(m, h, b->fc1_w, b->fc1_b);                       // (B,T,mlp*D)
        h = v->cfg.relu ? trn_relu(m, h) : trn_gelu(m, h);
        x = trn_add(m, x, trn_linear(m, h, b->fc2_w, b->fc2_b));
    }
    x = trn_layernorm(m, x, v->lnf_w, v->lnf_b);
    x = trn_mean_pool(m, x);                                           // (B,D)
    return trn_linear(m, x, v->head_w, v->head_b);                     // (B,K)
}

// ===========================================================================
// >>checkpoint: the kit's training-state checkpoint (safetensors: weights,
// AdamW moments and step) plus our own metadata: the model config, so a
// checkpoint of another shape is refused with a clear message, and the step
// (data order is a function of seed and epoch, so step is all the data
// loader needs to continue where it stopped).
// ===========================================================================

static void vit_config_str(const vit *v, char *buf, size_t n) {
    const vit_config *c = &v->cfg;
    snprintf(buf, n, "size=%d channels=%d patch=%d dim=%d depth=%d heads=%d mlp=%d act=%s classes=%d",
             c->size, c->channels, c->patch, c->dim, c->depth, c->heads, c->mlp,
             c->relu ? "relu" : "gelu", c->n_classes);
}

// DIR/ckpt_<step>.safetensors, written atomically; the newest two are kept.
// ack != NULL (--async-ckpt): a copy now, the file from a background thread.
static trn_result vit_save(vit *v, trn_adamw *opt, const char *dir, long long step,
                           const char *run, char *path_out, size_t path_cap, trn_ckpt_async *ack) {
    trn_meta meta = {0};
    char cfg[256];
    vit_config_str(v, cfg, sizeof cfg);
    trn_meta_set(&meta, "vit.config", cfg);
    trn_meta_set(&meta, "vit.run", run);
    trn_meta_set_u64(&meta, "vit.step", (uint64_t)step);
    if (ack) {
        ack->keep = 2;
        trn_result r = trn_checkpoint_save_async(ack, dir, step, &v->model, opt, &meta);
        snprintf(path_out, path_cap, "%s (async: training waited %.1f ms)", ack->path, 1e3 * ack->stage_seconds);
        return r;
    }
    return trn_checkpoint_save_dir(dir, step, 2, &v->model, opt, &meta, path_out, path_cap);
}

// path: a checkpoint file, or a directory (its newest valid checkpoint)
static trn_result vit_resume(vit *v, trn_adamw *opt, const char *path, const char *run,
                             long long *step) {
    char file[4096], cfg[256];
    struct stat st;
    trn_result r;
    if (stat(path, &st) != 0) return trn_fail(TRN_ERR_IO, "resume: %s: %s", path, strerror(errno));
    if (S_ISDIR(st.st_mode)) {
        long long s;
        if ((r = trn_checkpoint_latest(path, file, sizeof file, &s)) != TRN_OK) return r;
    } else {
        snprintf(file, sizeof file, "%s", path);
    }
    // look at the metadata before touching the model
    trn_safetensors f;
    if ((r = trn_safetensors_open(&f, file)) != TRN_OK) return r;
    const char *theirs = trn_safetensors_meta(&f, "vit.config");
    vit_config_str(v, cfg, sizeof cfg);
    if (!theirs || strcmp(theirs, cfg) != 0) {
        r = trn_fail(TRN_ERR_MISMATCH, "%s is for a model with %s; the flags give %s", file,
                     theirs ? theirs : "(no vit.config: not written by examples/vit)", cfg);
        trn_safetensors_close(&f);
        return r;
    }
    const char *their_run = trn_safetensors_meta(&f, "vit.run");
    if (their_run && strcmp(their_run, run) != 0)
        fprintf(stderr, "vit: warning: %s was written by a run with %s; this one has %s: the "
                "continuation will differ from an uninterrupted run\n", file, their_run, run);
    trn_safetensors_close(&f);

    trn_meta meta = {0};
    uint64_t s = 0;
    if ((r = trn_checkpoint_load(file, &v->model, opt, &meta)) != TRN_OK) return r;
    if ((r = trn_meta_get_u64(&meta, "vit.step", &s)) != TRN_OK) return r;
    *step = (long long)s;
    printf("resumed from %s at step %lld\n", file, *step);
    return TRN_OK;
}

// ===========================================================================
// >>report: confusion matrix, and a PNG grid of labelled test images
// ===========================================================================

// A 5x7 bitmap font, drawn for this file: one byte per row, top row first,
// bit 4 is the leftmost pixel. Lower case is drawn as upper case.
static const char FONT_CHARS[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 _-:/.=?(),%";
static const unsigned char FONT[][7] = {
    {0x0E,0x11,0x11,0x1F,0x11,0x11,0x11}, {0x1E,0x11,0x11,0x1E,0x11,0x11,0x1E}, // A B
    {0x0E,0x11,0x10,0x10,0x10,0x11,0x0E}, {0x1E,0x11,0x11,0x11,0x11,0x11,0x1E}, // C D
    {0x1F,0x10,0x10,0x1E,0x10,0x10,0x1F}, {0x1F,0x10,0x10,0x1E,0x10,0x10,0x10}, // E F
    {0x0E,0x11,0x10,0x17,0x11,0x11,0x0F}, {0x11,0x11,0x11,0x1F,0x11,0x11,0x11}, // G H
    {0x0E,0x04,0x04,0x04,0x04,0x04,0x0E}, {0x07,0x02,0x02,0x02,0x02,0x12,0x0C}, // I J
    {0x11,0x12,0x14,0x18,0x14,0x12,0x11}, {0x10,0x10,0x10,0x10,0x10,0x10,0x1F}, // K L
    {0x11,0x1B,0x15,0x15,0x11,0x11,0x11}, {0x11,0x11,0x19,0x15,0x13,0x11,0x11}, // M N
    {0x0E,0x11,0x11,0x11,0x11,0x11,0x0E}, {0x1E,0x11,0x11,0x1E,0x10,0x10,0x10}, // O P
    {0x0E,0x11,0x11,0x11,0x15,0x12,0x0D}, {0x1E,0x11,0x11,0x1E,0x14,0x12,0x11}, // Q R
    {0x0F,0x10,0x10,0x0E,0x01,0x01,0x1E}, {0x1F,0x04,0x04,0x04,0x04,0x04,0x04}, // S T
    {0x11,0x11,0x11,0x11,0x11,0x11,0x0E}, {0x11,0x11,0x11,0x11,0x11,0x0A,0x04}, // U V
    {0x11,0x11,0x11,0x15,0x15,0x15,0x0A}, {0x11,0x11,0x0A,0x04,0x0A,0x11,0x11}, // W X
    {0x11,0x11,0x0A,0x04,0x04,0x04,0x04}, {0x1F,0x01,0x02,0x04,0x08,0x10,0x1F}, // Y Z
    {0x0E,0x11,0x13,0x15,0x19,0x11,0x0E}, {0x04,0x0C,0x04,0x04,0x04,0x04,0x0E}, // 0 1
    {0x0E,0x11,0x01,0x02,0x04,0x08,0x1F}, {0x1F,0x02,0x04,0x02,0x01,0x11,0x0E}, // 2 3
    {0x02,0x06,0x0A,0x12,0x1F,0x02,0x02}, {0x1F,0x10,0x1E,0x01,0x01,0x11,0x0E}, // 4 5
    {0x06,0x08,0x10,0x1E,0x11,0x11,0x0E}, {0x1F,0x01,0x02,0x04,0x08,0x08,0x08}, // 6 7
    {0x0E,0x11,0x11,0x0E,0x11,0x11,0x0E}, {0x0E,0x11,0x11,0x0F,0x01,0x02,0x0C}, // 8 9
    {0x00,0x00,0x00,0x00,0x00,0x00,0x00}, {0x00,0x00,0x00,0x00,0x00,0x00,0x1F}, // ' ' _
    {0x00,0x00,0x00,0x1F,0x00,0x00,0x00}, {0x00,0x0C,0x0C,0x00,0x0C,0x0C,0x00}, // - :
    {0x01,0x01,0x02,0x04,0x08,0x10,0x10}, {0x00,0x00,0x00,0x00,0x00,0x0C,0x0C}, // / .
    {0x00,0x00,0x1F,0x00,0x1F,0x00,0x00}, {0x0E,0x11,0x01,0x02,0x04,0x00,0x04}, // = ?
    {0x02,0x04,0x08,0x08,0x08,0x04,0x02}, {0x08,0x04,0x02,0x02,0x02,0x04,0x08}, // ( )
    {0x00,0x00,0x00,0x00,0x0C,0x04,0x08}, {0x18,0x19,0x02,0x04,0x08,0x13,0x03}, // , %
};
enum { GLYPH_W = 5, GLYPH_H = 7, ADVANCE = 6 };

typedef struct canvas { unsigned char *rgb; int w, h; } canvas;

static void put_px(canvas *cv, int x, int y, const unsigned char *col) {
    if (x < 0 || y < 0 || x >= cv->w || y >= cv->h) return;
    memcpy(cv->rgb + ((size_t)y * cv->w + x) * 3, col, 3);
}

static void fill_rect(canvas *cv, int x0, int y0, int w, int h, const unsigned char *col) {
    for (int y = y0; y < y0 + h; y++)
        for (int x = x0; x < x0 + w; x++) put_px(cv, x, y, col);
}

// draws at most max_chars characters; returns the x after the text
static int draw_text(canvas *cv, int x, int y, const char *s, int max_chars, const unsigned char *col) {
    for (int i = 0; s[i] && i < max_chars; i++, x += ADVANCE) {
        const char *at = strchr(FONT_CHARS, toupper((unsigned char)s[i]));
        const unsigned char *g = FONT[at && *at ? at - FONT_CHARS : 43];  // 43: '?'
        for (int r = 0; r < GLYPH_H; r++)
            for (int c = 0; c < GLYPH_W; c++)
                if (g[r] & (0x10 >> c)) put_px(cv, x + c, y + r, col);
    }
    return x;
}

// the class name without a leading "<digits>_" (tools/fashion_mnist_png's
// "9_Ankle_boot" shows as "Ankle_boot")
static const char *display_name(const char *s) {
    const char *p = s;
    while (*p >= '0' && *p <= '9') p++;
    return (p != s && *p == '_' && p[1]) ? p + 1 : s;
}

// cols x rows test images picked at random (seeded), each scaled up, framed
// green when predicted right and red when wrong, with "P:<predicted>" and
// "T:<true>" under it, and a legend line on top.
static trn_result write_grid(const char *path, const image_set *s, const int *pred,
                             const string_list *classes, int cols, int rows, uint64_t seed) {
    static const unsigned char BLACK[3] = {0, 0, 0};
    static const unsigned char GREEN[3] = {0, 160, 0}, RED[3] = {210, 0, 0};
    int S = s->size, C = s->channels;
    int scale = S >= 84 ? 1 : (84 + S - 1) / S;     // images at least ~84 px
    int img = S * scale, pad = 3;
    int chars = 14;                                  // "P:T-shirt_top" fits
    int cell_w = (img + 2 * pad > chars * ADVANCE + 4) ? img + 2 * pad : chars * ADVANCE + 4;
    int cell_h = img + 2 * pad + 2 * (GLYPH_H + 3) + 4;
    int top = GLYPH_H * 2 + 12;
    int n = cols * rows < s->n ? cols * rows : s->n;
    rows = (n + cols - 1) / cols;
    canvas cv = {NULL, cols * cell_w, top + rows * cell_h};
    cv.rgb = (unsigned char *)malloc((size_t)cv.w * cv.h * 3);
    int *pick = (int *)malloc((size_t)s->n * sizeof(int));
    if (!cv.rgb || !pick) { free(cv.rgb); free(pick); return trn_fail(TRN_ERR_NOMEM, "grid: out of memory"); }
    memset(cv.rgb, 255, (size_t)cv.w * cv.h * 3);
    trn_rng rng;
    trn_rng_seed(&rng, seed);
    for (int i = 0; i < s->n; i++) pick[i] = i;
    trn_rng_shuffle(&rng, pick, s->n);

    int right = 0;
    for (int k = 0; k < n; k++) {
        int i = pick[k], ok = pred[i] == s->labels[i];
        right += ok;
        int x0 = (k % cols) * cell_w + (cell_w - img - 2 * pad) / 2, y0 = top + (k / cols) * cell_h;
        fill_rect(&cv, x0, y0, img + 2 * pad, img + 2 * pad, ok ? GREEN : RED);
        const unsigned char *p = s->pix + (size_t)i * S * S * C;
        for (int y = 0; y < img; y++)
            for (int x = 0; x < img; x++) {
                const unsigned char *q = p + ((size_t)(y / scale) * S + x / scale) * C;
                unsigned char col[3] = {q[0], q[C == 3 ? 1 : 0], q[C == 3 ? 2 : 0]};
                put_px(&cv, x0 + pad + x, y0 + pad + y, col);
            }
        int tx = (k % cols) * cell_w + 2, ty = y0 + img + 2 * pad + 3;
        char line[64];
        snprintf(line, sizeof line, "P:%s", display_name(classes->s[pred[i]]));
        draw_text(&cv, tx, ty, line, chars, ok ? BLACK : RED);
        snprintf(line, sizeof line, "T:%s", display_name(classes->s[s->labels[i]]));
        draw_text(&cv, tx, ty + GLYPH_H + 3, line, chars, BLACK);
    }
    char legend[128];
    snprintf(legend, sizeof legend, "P = PREDICTED, T = TRUE. %d OF %d RIGHT", right, n);
    draw_text(&cv, 4, 4, legend, (cv.w - 8) / ADVANCE, BLACK);
    int x = draw_text(&cv, 4, 4 + GLYPH_H + 4, "GREEN = RIGHT", 13, GREEN);
    draw_text(&cv, x + ADVANCE, 4 + GLYPH_H + 4, "RED = WRONG", 11, RED);

    int ok = stbi_write_png(path, cv.w, cv.h, 3, cv.rgb, cv.w * 3);
    free(cv.rgb);
    free(pick);
    return ok ? TRN_OK : trn_fail(TRN_ERR_IO, "cannot write %s", path);
}

// rows: true class, columns: predicted class
static void print_confusion(const int *conf, const string_list *classes) {
    int K = classes->n;
    printf("confusion matrix (rows: true class, columns: predicted)\n      ");
    for (int j = 0; j < K; j++) printf(" %5d", j);
    printf("   recall  class\n");
    for (int i = 0; i < K; i++) {
        long row = 0;
        for (int j = 0; j < K; j++) row += conf[i * K + j];
        printf("  %3d ", i);
        for (int j = 0; j < K; j++) printf(" %5d", conf[i * K + j]);
        printf("   %6.3f  %s\n", row ? (double)conf[i * K + i] / (double)row : 0.0, classes->s[i]);
    }
}

// ===========================================================================
// >>train
// ===========================================================================

// host buffers for one batch
typedef struct batch_bufs {
    float *x;        // (B, size, size, channels) normalized pixels
    float *patches;  // (B, T, patch_dim)
    float *logits;   // (B, K)
    int *y, *idx;    // (B)
} batch_bufs;

static int argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++) if (x[i] > x[best]) best = i;
    return best;
}

// forward only (no tape) over all of s; pred[i] = predicted class of image i;
// returns the accuracy and fills conf (K x K) when given
static double evaluate(vit *v, const image_set *s, int batch, const float *mean,
                       const float *std, batch_bufs *bb, int *pred, int *conf) {
    trn_model *m = &v->model;
    int K = v->cfg.n_classes, right = 0;
    m->grad_enabled = 0;  // like torch.no_grad(): ops record nothing
    for (int i0 = 0; i0 < s->n; i0 += batch) {
        int B = s->n - i0 < batch ? s->n - i0 : batch;
        for (int b = 0; b < B; b++) bb->idx[b] = i0 + b;
        make_batch(bb->x, bb->y, s, bb->idx, B, mean, std);
        trn_patchify(bb->patches, bb->x, B, s->size, s->size, s->channels, v->cfg.patch);
        trn_reset(m);
        trn_read(m, vit_forward(v, bb->patches, B), bb->logits);
        for (int b = 0; b < B; b++) {
            int p = argmax(bb->logits + (size_t)b * K, K);
            pred[i0 + b] = p;
            right += p == bb->y[b];
            if (conf) conf[bb->y[b] * K + p]++;
        }
    }
    m->grad_enabled = 1;
    return s->n ? (double)right / s->n : 0.0;
}

// the data order of epoch e depends only on (seed, e), so a run resumed at
// step k sees exactly the batches the uninterrupted run would have
static void epoch_order(int *order, int n, uint64_t seed, long long epoch) {
    trn_rng rng;
    trn_rng_seed(&rng, seed * 0x9E3779B97F4A7C15ull + (uint64_t)epoch + 1);
    for (int i = 0; i < n; i++) order[i] = i;
    trn_rng_shuffle(&rng, order, n);
}

// ===========================================================================
// main: flags, load, train, report
// ===========================================================================

#define CHECK_OK(call, hint) do { \
    trn_result check_r_ = (call); \
    if (check_r_ != TRN_OK) { \
        fprintf(stderr, "vit: %s (%s)\n  at %s:%d%s%s\n", trn_error_reason(), \
                trn_result_string(check_r_), __FILE__, __LINE__, (hint)[0] ? "\n  hint: " : "", (hint)); \
        exit(2); \
    } \
} while (0)

static void usage(FILE *f) {
    fprintf(f,
        "usage: examples/vit [flags]\n"
        "Trains a small Vision Transformer on an image folder (ImageFolder layout:\n"
        "DATA/train/<class>/*.png, DATA/test/<class>/*.png; PNG/JPG/BMP/... via stb_image).\n"
        "  --data DIR        image folder root, default runs/fashion\n"
        "                    (make it with: tools/fashion_mnist_png runs/fashion)\n"
        "  --epochs N        passes over train/, default 5\n"
        "  --batch N         images per step, default 128\n"
        "  --lr X            peak learning rate (AdamW), default 2e-3\n"
        "  --warmup N        linear warmup steps (0 = 5%% of all steps), default 0\n"
        "  --weight-decay X  AdamW weight decay on matrices, default 0.05\n"
        "  --dim N           width D, default 64\n"
        "  --depth N         transformer blocks, default 4\n"
        "  --heads N         attention heads (must divide dim), default 4\n"
        "  --mlp N           MLP hidden width = N * dim, default 4\n"
        "  --act relu|gelu   MLP activation, default relu (see the note in the source)\n"
        "  --patch N         patch side in pixels (must divide size), default 7\n"
        "  --size N          images are resized to N x N, default 28\n"
        "  --channels N      1 (gray) or 3 (RGB); 0 = as the first image, default 0\n"
        "  --strict-channels skip images whose channel count differs (default: convert)\n"
        "  --threads N       OpenMP threads (0 = all cores), default 0\n"
        "  --seed N          initialization and data order, default 1337\n"
        "  --out DIR         checkpoint and predictions.png go here, default runs/vit\n"
        "  --resume PATH     continue from a checkpoint written by this program\n"
        "  --limit N         use only the first N images of each split (quick runs)\n"
        "  --stop-after N    stop after N epochs as if interrupted (to try --resume)\n"
        "  --async-ckpt      write checkpoints from a background thread\n"
        "  --tensorboard DIR TensorBoard event files: loss, lr, grad_norm, images/s, accuracies, memory\n"
        "  --csv FILE        one CSV row per epoch\n"
        "  --profile         time and bytes per op kind (forward, backward) after the run\n"
        "  --help            this text\n");
}

static int flag_int(const char *flag, const char *s, long lo, long hi, int *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "vit: %s wants an integer in [%ld, %ld], got '%s'\n", flag, lo, hi, s);
        exit(2);
    }
    *out = (int)v;
    return 0;
}

static float flag_float(const char *flag, const char *s, double lo, double hi) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi)) {
        fprintf(stderr, "vit: %s wants a number in [%g, %g], got '%s'\n", flag, lo, hi, s);
        exit(2);
    }
    return (float)v;
}

int main(int argc, char **argv) {
    trn_omp_wait_passive(argv); // OpenMP threads sleep when idle (unless OMP_WAIT_POLICY is set)
    setvbuf(stdout, NULL, _IOLBF, 0); // piped (a log, tee): each line as it is printed, not at exit
    // defaults: chosen to pass 85% on Fashion-MNIST's test set well within
    // 10 minutes on 2 CPU cores (measured: 87% after 5 epochs)
    const char *data = "runs/fashion";  // ImageFolder root with train/ and test/
    const char *out_dir = "runs/vit";   // checkpoint + predictions.png
    const char *resume = NULL;          // checkpoint to continue from
    int epochs = 5;                     // passes over the training set
    int batch = 128;                    // images per optimizer step
    float lr = 2e-3f;                   // peak learning rate
    int warmup = 0;                     // warmup steps; 0 = 5% of the run
    float weight_decay = 0.05f;         // AdamW decay (matrices only)
    int dim = 64, depth = 4, heads = 4; // the transformer
    int mlp = 4;                        // MLP hidden width = mlp * dim
    int relu = 1;                       // activation: ReLU, not the paper's GELU:
                                        //   train.h's GELU calls tanhf per element,
                                        //   which costs more than all the matmuls
                                        //   of this small model (--act gelu to try)
    int patch = 7, size = 28;           // 28x28 -> 4x4 = 16 patches of 7x7
    int channels = 0;                   // 0: as the data
    int strict = 0;                     // 1: skip gray<->RGB mismatches
    int threads = 0;                    // 0: OpenMP's default (all cores)
    int seed = 1337;
    int limit = 0;                      // 0: every image
    int stop_after = 0;                 // >0: quit after this many epochs
    int async_ckpt = 0, profile = 0;    // the loop extras (extras/train_loop.h)
    const char *tensorboard = NULL, *csv_path = NULL;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 0; }
        if (!strcmp(a, "--strict-channels")) { strict = 1; continue; }
        if (!strcmp(a, "--async-ckpt")) { async_ckpt = 1; continue; }
        if (!strcmp(a, "--profile")) { profile = 1; continue; }
        if (!val || a[0] != '-' || a[1] != '-') {
            fprintf(stderr, "vit: %s: unknown argument or missing value (see --help)\n", a);
            return 2;
        }
        i++;
        if (!strcmp(a, "--data")) data = val;
        else if (!strcmp(a, "--out")) out_dir = val;
        else if (!strcmp(a, "--resume")) resume = val;
        else if (!strcmp(a, "--epochs")) flag_int(a, val, 1, 100000, &epochs);
        else if (!strcmp(a, "--batch")) flag_int(a, val, 1, 65536, &batch);
        else if (!strcmp(a, "--lr")) lr = flag_float(a, val, 0, 10);
        else if (!strcmp(a, "--warmup")) flag_int(a, val, 0, 1 << 30, &warmup);
        else if (!strcmp(a, "--weight-decay")) weight_decay = flag_float(a, val, 0, 10);
        else if (!strcmp(a, "--dim")) flag_int(a, val, 1, 4096, &dim);
        else if (!strcmp(a, "--depth")) flag_int(a, val, 1, 256, &depth);
        else if (!strcmp(a, "--heads")) flag_int(a, val, 1, 256, &heads);
        else if (!strcmp(a, "--mlp")) flag_int(a, val, 1, 64, &mlp);
        else if (!strcmp(a, "--act")) {
            if (strcmp(val, "gelu") && strcmp(val, "relu")) { fprintf(stderr, "vit: --act wants gelu or relu, got '%s'\n", val); return 2; }
            relu = !strcmp(val, "relu");
        }
        else if (!strcmp(a, "--patch")) flag_int(a, val, 1, 1024, &patch);
        else if (!strcmp(a, "--size")) flag_int(a, val, 1, 4096, &size);
        else if (!strcmp(a, "--channels")) flag_int(a, val, 0, 3, &channels);
        else if (!strcmp(a, "--threads")) flag_int(a, val, 0, 1024, &threads);
        else if (!strcmp(a, "--seed")) flag_int(a, val, 0, 2147483647, &seed);
        else if (!strcmp(a, "--limit")) flag_int(a, val, 0, 2147483647, &limit);
        else if (!strcmp(a, "--stop-after")) flag_int(a, val, 0, 100000, &stop_after);
        else if (!strcmp(a, "--tensorboard")) tensorboard = val;
        else if (!strcmp(a, "--csv")) csv_path = val;
        else { fprintf(stderr, "vit: unknown flag %s (see --help)\n", a); return 2; }
    }
    if (channels == 2) { fprintf(stderr, "vit: --channels must be 0, 1 or 3\n"); return 2; }
    if (size % patch) { fprintf(stderr, "vit: --patch %d does not divide --size %d\n", patch, size); return 2; }
    if (dim % heads) { fprintf(stderr, "vit: --heads %d does not divide --dim %d\n", heads, dim); return 2; }
    trn_set_threads(threads);

    // ---- data
    char path[4096];
    string_list classes = {0};
    image_set train = {0}, test = {0};
    double t0 = now_s();
    snprintf(path, sizeof path, "%s/train", data);
    printf("loading %s and %s/test (all threads) ...\n", path, data);
    CHECK_OK(image_folder_load(path, &classes, size, &channels, limit, strict, &train),
             "make the data with: tools/fashion_mnist_png runs/fashion");
    snprintf(path, sizeof path, "%s/test", data);
    CHECK_OK(image_folder_load(path, &classes, size, &channels, limit, strict, &test),
             "DATA/test/ must hold the same class folders as DATA/train/");
    int K = classes.n;
    float mean[3], std[3];
    image_set_stats(&train, mean, std);
    printf("data: %d train + %d test images, %d classes, %dx%dx%d, loaded in %.1f s "
           "(%d bad skipped, %d converted)\n", train.n, test.n, K, size, size, channels,
           now_s() - t0, train.n_bad + test.n_bad, train.n_converted + test.n_converted);
    printf("normalize: mean %.4f std %.4f%s\n", mean[0], std[0], channels == 3 ? " (channel 0)" : "");

    // ---- model and optimizer
    if (batch > train.n) batch = train.n;
    vit_config cfg = {size, channels, patch, dim, depth, heads, mlp, relu, K};
    vit v;
    CHECK_OK(vit_init(&v, &cfg, batch, (uint64_t)seed), "");
    trn_model *m = &v.model;
    trn_adamw_desc od = {0};
    od.lr = lr;
    od.beta1 = 0.9f;
    od.beta2 = 0.999f;
    od.weight_decay = weight_decay;
    od.no_weight_decay = weight_decay == 0;
    trn_adamw opt;
    trn_adamw_init(&opt, &od);
    long long steps_per_epoch = train.n / batch;        // the last partial batch is dropped
    long long total_steps = steps_per_epoch * epochs;
    if (warmup == 0) warmup = (int)(total_steps / 20 > 1 ? total_steps / 20 : 1);
    const trn_schedule sched = {TRN_SCHEDULE_COSINE, warmup, total_steps, lr, lr * 0.01f, 0}; // cosine to lr/100
    printf("model: ViT %d blocks, dim %d, %d heads, MLP %d (%s), %d patches of %dx%d, %zu parameters\n",
           depth, dim, heads, mlp * dim, relu ? "relu" : "gelu", v.T, patch, patch, m->n_floats);
    printf("train: %d epochs x %lld steps of %d, AdamW lr %g (warmup %d, cosine to %g), wd %g, "
           "%d threads\n", epochs, steps_per_epoch, batch, lr, warmup, lr * 0.01, weight_decay,
           trn_get_threads());
    if (trn_mkdirs(out_dir) != TRN_OK) { fprintf(stderr, "vit: cannot create %s: %s\n", out_dir, trn_error_reason()); return 2; }

    // what must match for a resumed run to continue the same run
    char run[256];
    snprintf(run, sizeof run, "data=%d epochs=%d batch=%d lr=%g warmup=%d wd=%g seed=%d", train.n,
             epochs, batch, lr, warmup, weight_decay, seed);
    long long step = 0;
    if (resume) {
        CHECK_OK(vit_resume(&v, &opt, resume, run, &step), "resume with the flags of the run that wrote it");
        if (step > total_steps) step = total_steps;
    }

    // ---- train
    batch_bufs bb;
    size_t img_floats = (size_t)size * size * channels;
    bb.x = (float *)malloc((size_t)batch * img_floats * sizeof(float));
    bb.patches = (float *)malloc((size_t)batch * img_floats * sizeof(float));
    bb.logits = (float *)malloc((size_t)batch * K * sizeof(float));
    bb.y = (int *)malloc((size_t)batch * sizeof(int));
    bb.idx = (int *)malloc((size_t)batch * sizeof(int));
    int *order = (int *)malloc((size_t)train.n * sizeof(int));
    int *pred = (int *)malloc((size_t)test.n * sizeof(int));
    int *conf = (int *)calloc((size_t)K * K, sizeof(int));
    if (!bb.x || !bb.patches || !bb.logits || !bb.y || !bb.idx || !order || !pred || !conf) {
        fprintf(stderr, "vit: out of memory\n");
        return 2;
    }
    // >>loop: progress (in place on a terminal; an ETA on the epoch lines), logs, async saves, profile
    trn_progress prog;
    trn_progress_init(&prog, step, total_steps);
    prog.unit = "img/s";
    long long log_every = steps_per_epoch / 10 > 0 ? steps_per_epoch / 10 : 1; // steps between lines in a log
    trn_tb_writer tb = {0};
    if (tensorboard) CHECK_OK(trn_tb_open(&tb, tensorboard), "--tensorboard DIR must be a directory we can create");
    trn_csv csv = {0};
    if (csv_path) CHECK_OK(trn_csv_open(&csv, csv_path, "epoch,step,loss,train_acc,test_acc,seconds", resume ? step : -1), "");
    trn_ckpt_async ack = {0};
    trn_profile prof;
    if (profile) trn_profile_attach(&prof, m);
    double train_acc = -1, test_acc = 0, t_train = now_s();
    for (long long epoch = step / steps_per_epoch; epoch < epochs; epoch++) {
        double te = now_s(), loss_sum = 0;
        long long right = 0, seen = 0;
        epoch_order(order, train.n, (uint64_t)seed, epoch);
        for (long long s = step % steps_per_epoch; s < steps_per_epoch; s++, step++) {
            double ts = now_s();
            make_batch(bb.x, bb.y, &train, order + s * batch, batch, mean, std);
            trn_patchify(bb.patches, bb.x, batch, size, size, channels, patch);
            trn_zero_grad(m);
            trn_reset(m);
            trn_tensor *logits = vit_forward(&v, bb.patches, batch);
            trn_tensor *loss = trn_cross_entropy(m, logits, bb.y, K);   // K real classes
            trn_backward(m, loss);
            float norm = trn_clip_grad_norm(m, 1.0f);
            float lr_now = trn_schedule_lr(&sched, step);
            CHECK_OK(trn_adamw_step(&opt, m, lr_now), "");
            float l = trn_item(m, loss);
            loss_sum += l;
            double ips = batch / (now_s() - ts);
            if (prog.tty) trn_progress_step(&prog, step + 1, l, ips, NULL); // in place
            else if ((s + 1) % log_every == 0 && s + 1 < steps_per_epoch) { // a log: 10 lines an epoch
                char line[128];
                snprintf(line, sizeof line, "step %lld/%lld | loss %.4f | %.0f img/s", step + 1, total_steps, l, ips);
                trn_progress_step(&prog, step + 1, l, ips, line);
            }
            if (tb.f) {
                CHECK_OK(trn_tb_scalar(&tb, "loss", step + 1, l), "");
                CHECK_OK(trn_tb_scalar(&tb, "lr", step + 1, lr_now), "");
                CHECK_OK(trn_tb_scalar(&tb, "grad_norm", step + 1, norm), "");
                CHECK_OK(trn_tb_scalar(&tb, "images_per_s", step + 1, ips), "");
                CHECK_OK(trn_tb_memory(&tb, step + 1), "");
            }
            trn_read(m, logits, bb.logits);
            for (int b = 0; b < batch; b++) right += argmax(bb.logits + (size_t)b * K, K) == bb.y[b];
            seen += batch;
        }
        train_acc = seen ? (double)right / (double)seen : 0;
        test_acc = evaluate(&v, &test, batch, mean, std, &bb, pred, NULL);
        char eta[32];
        trn_progress_break(&prog);
        printf("epoch %lld/%d  loss %.4f  train_acc %.4f  test_acc %.4f  %.1f s  (total %.1f s, eta %s)\n",
               epoch + 1, epochs, seen ? loss_sum / (double)(seen / batch) : 0.0, train_acc,
               test_acc, now_s() - te, now_s() - t0, trn_duration_str(trn_progress_eta(&prog, step), eta, sizeof eta));
        fflush(stdout);
        if (tb.f) {
            CHECK_OK(trn_tb_scalar(&tb, "train_acc", step, train_acc), "");
            CHECK_OK(trn_tb_scalar(&tb, "test_acc", step, test_acc), "");
            CHECK_OK(trn_tb_flush(&tb), "");
        }
        if (csv.f) {
            double row[6] = {(double)(epoch + 1), (double)step, seen ? loss_sum / (double)(seen / batch) : NAN, train_acc,
                             test_acc, now_s() - te};
            CHECK_OK(trn_csv_row(&csv, row), "");
        }
        CHECK_OK(vit_save(&v, &opt, out_dir, step, run, path, sizeof path, async_ckpt ? &ack : NULL), "");
        printf("checkpoint %s\n", path);
        if (stop_after > 0 && epoch + 1 >= stop_after && epoch + 1 < epochs) {
            printf("stopping after epoch %lld (--stop-after); continue with --resume %s\n",
                   epoch + 1, out_dir);
            trn_ckpt_async_free(&ack); // the last save is on disk before we exit
            return 0;
        }
    }
    CHECK_OK(trn_checkpoint_wait(&ack), "");
    trn_ckpt_async_free(&ack);
    trn_tb_close(&tb);
    trn_csv_close(&csv);
    if (profile) {
        trn_profile_print(&prof, stdout);
        trn_profile_free(&prof);
    }
    double train_s = now_s() - t_train;

    // ---- report
    test_acc = evaluate(&v, &test, batch, mean, std, &bb, pred, conf);
    print_confusion(conf, &classes);
    snprintf(path, sizeof path, "%s/predictions.png", out_dir);
    CHECK_OK(write_grid(path, &test, pred, &classes, 8, 6, (uint64_t)seed), "");
    printf("wrote %s (test images, predicted/true)\n", path);
    if (train_acc >= 0) printf("train_acc %.4f\n", train_acc);  // absent: nothing left to train
    printf("test_acc %.4f\n", test_acc);
    printf("bad_images %d\n", train.n_bad + test.n_bad);
    printf("converted_images %d\n", train.n_converted + test.n_converted);
    printf("train_seconds %.1f\n", train_s);
    printf("total_seconds %.1f\n", now_s() - t0);

    free(bb.x); free(bb.patches); free(bb.logits); free(bb.y); free(bb.idx);
    free(order); free(pred); free(conf);
    trn_adamw_free(&opt);
    vit_free(&v);
    image_set_free(&train);
    image_set_free(&test);
    strings_free(&classes);
    return 0;
}
