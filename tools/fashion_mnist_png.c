// fashion_mnist_png - writes Fashion-MNIST out as folders of PNG files, the
// layout torchvision's ImageFolder reads (one folder per class), so that
// examples/vit trains from real image files loaded with stb_image.
//
//   tools/fashion_mnist_png runs/fashion            (Debian's dataset-fashion-mnist)
//   tools/fashion_mnist_png --src DIR runs/fashion  (IDX files elsewhere; .gz or not)
//   tools/fashion_mnist_png --make-toy runs/toy     (a tiny two-class stripe set)
//
// Output: OUT/train/<class>/<index>.png and OUT/test/<class>/<index>.png, 28x28
// 8-bit grayscale, <index> the image's position in its IDX file (zero-padded,
// so the names sort in file order). Class folders carry the Fashion-MNIST
// label number in front of the class name ("0_T-shirt_top" ... "9_Ankle_boot"),
// so ImageFolder's sorted order gives back the dataset's own label numbers.
//
// build: -lstb
// requires: have_lib libstb-dev stb/stb_image_write.h stbi_write_png -lstb
//
// The IDX format (LeCun's MNIST page; Fashion-MNIST reuses it): big-endian
//   u32 magic = 0x00000800 | (type << 8 is 0x08 = unsigned byte) | ndim
//   u32 dim[ndim], then the bytes, row-major.
// Images are magic 0x00000803 with dims (N, 28, 28); labels 0x00000801 with (N).
// The Debian package ships them gzipped; we read .gz through `gzip -dc`.
#define _POSIX_C_SOURCE 200809L /* popen: this tool does not include train.h, which would turn POSIX on */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <stb/stb_image_write.h>

#define DEFAULT_SRC "/usr/share/datasets/fashion-mnist"

// The ten classes, in label order. '/' of "T-shirt/top" cannot be in a folder name.
static const char *CLASS_NAMES[10] = {
    "T-shirt_top", "Trouser", "Pullover", "Dress", "Coat",
    "Sandal", "Shirt", "Sneaker", "Bag", "Ankle_boot",
};

static void usage(FILE *f) {
    fprintf(f,
        "usage: tools/fashion_mnist_png [options] OUT\n"
        "  writes OUT/train/<class>/<index>.png and OUT/test/<class>/<index>.png\n"
        "  --src DIR      IDX files (train-images-idx3-ubyte[.gz] ...), default " DEFAULT_SRC "\n"
        "  --limit N      write only the first N images of each split (0 = all)\n"
        "  --make-toy     instead: a two-class toy set (horizontal vs vertical stripes)\n"
        "  --toy-n N      toy: images per class in train/ (test/ gets N/4), default 64\n"
        "  --toy-size S   toy: image side in pixels, default 16\n"
        "  --seed N       toy: random seed, default 1\n"
        "  --help         this text\n");
}

// ---------------------------------------------------------------------------
// reading a whole file, gunzipping it when its name ends in .gz

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

// read everything from f into a malloc'd buffer; NULL on error (errno kept)
static unsigned char *read_stream(FILE *f, size_t *n_out) {
    size_t cap = 1 << 20, n = 0;
    unsigned char *buf = (unsigned char *)malloc(cap);
    if (!buf) return NULL;
    for (;;) {
        if (n == cap) {
            unsigned char *nb = (unsigned char *)realloc(buf, cap * 2);
            if (!nb) { free(buf); return NULL; }
            buf = nb; cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) break;
    }
    if (ferror(f)) { free(buf); return NULL; }
    *n_out = n;
    return buf;
}

// returns a malloc'd buffer with the (decompressed) contents, or NULL after
// printing why
static unsigned char *read_file(const char *path, size_t *n_out) {
    FILE *f = fopen(path, "rb");
    if (!f) { fprintf(stderr, "fashion_mnist_png: open %s: %s\n", path, strerror(errno)); return NULL; }
    if (!ends_with(path, ".gz")) {
        unsigned char *buf = read_stream(f, n_out);
        if (!buf) fprintf(stderr, "fashion_mnist_png: read %s: %s\n", path, strerror(errno));
        fclose(f);
        return buf;
    }
    fclose(f);
    // quote the path for the shell: 'it'\''s' style
    size_t len = strlen(path);
    char *cmd = (char *)malloc(len * 4 + 32);
    if (!cmd) return NULL;
    char *p = cmd + sprintf(cmd, "gzip -dc -- '");
    for (size_t i = 0; i < len; i++) {
        if (path[i] == '\'') { memcpy(p, "'\\''", 4); p += 4; }
        else *p++ = path[i];
    }
    strcpy(p, "'");
    FILE *pipe = popen(cmd, "r");
    free(cmd);
    if (!pipe) { fprintf(stderr, "fashion_mnist_png: cannot run gzip for %s\n", path); return NULL; }
    unsigned char *buf = read_stream(pipe, n_out);
    int status = pclose(pipe);
    if (!buf || status != 0) {
        fprintf(stderr, "fashion_mnist_png: gzip -dc %s failed (corrupt .gz or no gzip?)\n", path);
        free(buf);
        return NULL;
    }
    return buf;
}

// find DIR/NAME or DIR/NAME.gz and read it
static unsigned char *read_idx(const char *dir, const char *name, size_t *n_out) {
    char path[4096];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (stat(path, &st) != 0) snprintf(path, sizeof path, "%s/%s.gz", dir, name);
    return read_file(path, n_out);
}

static uint32_t be32(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

// ---------------------------------------------------------------------------
// writing

// mkdir -p; 0 on success
static int mkdirs(const char *path) {
    char tmp[4096];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof tmp) return -1;
    memcpy(tmp, path, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (tmp[i] == '/' || tmp[i] == 0) {
            char c = tmp[i];
            tmp[i] = 0;
            if (mkdir(tmp, 0755) != 0 && errno != EEXIST) {
                fprintf(stderr, "fashion_mnist_png: mkdir %s: %s\n", tmp, strerror(errno));
                return -1;
            }
            tmp[i] = c;
        }
    }
    return 0;
}

static int write_png(const char *path, const unsigned char *pix, int w, int h) {
    if (!stbi_write_png(path, w, h, 1, pix, w)) {
        fprintf(stderr, "fashion_mnist_png: cannot write %s\n", path);
        return -1;
    }
    return 0;
}

// one split: images + labels -> OUT/split/<class>/<index>.png; returns count or -1
static long write_split(const char *src, const char *out, const char *split,
                        const char *img_name, const char *lbl_name, long limit) {
    size_t ni = 0, nl = 0;
    unsigned char *img = read_idx(src, img_name, &ni);
    if (!img) return -1;
    unsigned char *lbl = read_idx(src, lbl_name, &nl);
    if (!lbl) { free(img); return -1; }
    long written = -1;
    if (ni < 16 || be32(img) != 0x00000803) {
        fprintf(stderr, "fashion_mnist_png: %s/%s: not an IDX image file (magic %08x)\n",
                src, img_name, ni >= 4 ? be32(img) : 0u);
        goto done;
    }
    if (nl < 8 || be32(lbl) != 0x00000801) {
        fprintf(stderr, "fashion_mnist_png: %s/%s: not an IDX label file\n", src, lbl_name);
        goto done;
    }
    uint32_t n = be32(img + 4), rows = be32(img + 8), cols = be32(img + 12);
    if (rows == 0 || cols == 0 || rows > 4096 || cols > 4096 ||
        (uint64_t)n * rows * cols != ni - 16) {
        fprintf(stderr, "fashion_mnist_png: %s/%s: header says %u x %u x %u but file has %zu bytes\n",
                src, img_name, n, rows, cols, ni - 16);
        goto done;
    }
    if (be32(lbl + 4) != n || nl - 8 != n) {
        fprintf(stderr, "fashion_mnist_png: %s has %u labels for %u images\n", lbl_name,
                be32(lbl + 4), n);
        goto done;
    }
    if (limit > 0 && (uint32_t)limit < n) n = (uint32_t)limit;
    char path[4096];
    for (int c = 0; c < 10; c++) {
        snprintf(path, sizeof path, "%s/%s/%d_%s", out, split, c, CLASS_NAMES[c]);
        if (mkdirs(path) != 0) goto done;
    }
    for (uint32_t i = 0; i < n; i++) {
        int c = lbl[8 + i];
        if (c > 9) {
            fprintf(stderr, "fashion_mnist_png: %s: label %d of image %u is not 0..9\n",
                    lbl_name, c, i);
            goto done;
        }
        snprintf(path, sizeof path, "%s/%s/%d_%s/%05u.png", out, split, c, CLASS_NAMES[c], i);
        if (write_png(path, img + 16 + (size_t)i * rows * cols, (int)cols, (int)rows) != 0)
            goto done;
    }
    written = n;
done:
    free(img);
    free(lbl);
    return written;
}

// ---------------------------------------------------------------------------
// the toy set: class "horizontal" has horizontal stripes, "vertical" vertical
// ones, each with a random period, phase, contrast and a little noise, so a
// model must look at the direction, not at one pixel.

static uint64_t toy_state;
static uint32_t toy_rand(void) { // splitmix64, upper bits
    uint64_t z = (toy_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return (uint32_t)((z ^ (z >> 31)) >> 32);
}

static int make_toy(const char *out, int n_per_class, int size, uint64_t seed) {
    static const char *names[2] = {"horizontal", "vertical"};
    const char *splits[2] = {"train", "test"};
    int counts[2] = {n_per_class, n_per_class / 4 > 0 ? n_per_class / 4 : 1};
    unsigned char *pix = (unsigned char *)malloc((size_t)size * size);
    if (!pix) return -1;
    toy_state = seed;
    char path[4096];
    for (int s = 0; s < 2; s++)
        for (int c = 0; c < 2; c++) {
            snprintf(path, sizeof path, "%s/%s/%s", out, splits[s], names[c]);
            if (mkdirs(path) != 0) { free(pix); return -1; }
            for (int i = 0; i < counts[s]; i++) {
                int period = 2 + (int)(toy_rand() % 4);         // 2..5 pixels
                int phase = (int)(toy_rand() % (uint32_t)period);
                int lo = (int)(toy_rand() % 60), hi = 180 + (int)(toy_rand() % 76);
                for (int y = 0; y < size; y++)
                    for (int x = 0; x < size; x++) {
                        int along = c == 0 ? y : x;
                        int on = ((along + phase) % period) < (period + 1) / 2;
                        int v = (on ? hi : lo) + (int)(toy_rand() % 31) - 15;
                        pix[y * size + x] = (unsigned char)(v < 0 ? 0 : v > 255 ? 255 : v);
                    }
                snprintf(path, sizeof path, "%s/%s/%s/%04d.png", out, splits[s], names[c], i);
                if (write_png(path, pix, size, size) != 0) { free(pix); return -1; }
            }
        }
    free(pix);
    printf("wrote %d train + %d test images (2 classes, %dx%d) to %s\n", 2 * counts[0],
           2 * counts[1], size, size, out);
    return 0;
}

// ---------------------------------------------------------------------------

static int parse_long(const char *s, long lo, long hi, long *v) {
    char *end;
    errno = 0;
    long x = strtol(s, &end, 10);
    if (errno || end == s || *end || x < lo || x > hi) return -1;
    *v = x;
    return 0;
}

int main(int argc, char **argv) {
    const char *src = DEFAULT_SRC, *out = NULL;
    long limit = 0, toy_n = 64, toy_size = 16, seed = 1;
    int toy = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int has_val = i + 1 < argc;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 0; }
        else if (!strcmp(a, "--make-toy")) toy = 1;
        else if (!strcmp(a, "--src") && has_val) src = argv[++i];
        else if (!strcmp(a, "--limit") && has_val) {
            if (parse_long(argv[++i], 0, 1L << 30, &limit)) goto bad_value;
        } else if (!strcmp(a, "--toy-n") && has_val) {
            if (parse_long(argv[++i], 1, 1000000, &toy_n)) goto bad_value;
        } else if (!strcmp(a, "--toy-size") && has_val) {
            if (parse_long(argv[++i], 4, 1024, &toy_size)) goto bad_value;
        } else if (!strcmp(a, "--seed") && has_val) {
            if (parse_long(argv[++i], 0, 1L << 62, &seed)) goto bad_value;
        } else if (a[0] == '-') {
            fprintf(stderr, "fashion_mnist_png: unknown flag or missing value: %s (see --help)\n", a);
            return 2;
        } else if (!out) out = a;
        else { fprintf(stderr, "fashion_mnist_png: more than one OUT directory\n"); return 2; }
        continue;
    bad_value:
        fprintf(stderr, "fashion_mnist_png: bad value for %s: %s\n", a, argv[i]);
        return 2;
    }
    if (!out) { fprintf(stderr, "fashion_mnist_png: no OUT directory (see --help)\n"); return 2; }
    if (toy) return make_toy(out, (int)toy_n, (int)toy_size, (uint64_t)seed) == 0 ? 0 : 2;

    long n_train = write_split(src, out, "train", "train-images-idx3-ubyte",
                               "train-labels-idx1-ubyte", limit);
    if (n_train < 0) return 2;
    long n_test = write_split(src, out, "test", "t10k-images-idx3-ubyte",
                              "t10k-labels-idx1-ubyte", limit);
    if (n_test < 0) return 2;
    printf("wrote %ld train + %ld test images (10 classes, 28x28 gray) to %s\n", n_train,
           n_test, out);
    return 0;
}
