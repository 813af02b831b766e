/* bench/tokenizer.c - encode speed of the kit's tokenizer.json reader
   (extras/train_data.h), one core.

      bench/tokenizer DIR NAME [REPS]

   DIR is what tests/hf_tokenizer_ref.py writes (docs.bin: about 1 MB of
   held-out documents; NAME.json: a tokenizer). Encodes every document
   (trn_tokenizer_encode: added tokens matched, no BOS) REPS times [7] and
   prints one line: "kit NAME: MEDIAN MB/s (min .. max), N ids". The
   package's side, in the same run on the same text: bench/tokenizer.py,
   which runs this program and prints both. */
#define TRAIN_IMPLEMENTATION
#include "train.h"
#include "extras/train_data.h"

#include <stdlib.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    char path[4096];
    trn_tokenizer tok;
    trn_tokens ids = {0};
    const char *dir, *name;
    char *docs;
    size_t n_file, bytes = 0;
    int32_t n_docs;
    int reps = 7, r, i;
    double t[64];
    if (argc < 3) { fprintf(stderr, "usage: tokenizer DIR NAME [REPS]\n"); return 2; }
    dir = argv[1];
    name = argv[2];
    if (argc > 3) reps = atoi(argv[3]);
    if (reps < 1 || reps > 64) { fprintf(stderr, "tokenizer: REPS must be 1..64\n"); return 2; }
    snprintf(path, sizeof path, "%s/docs.bin", dir);
    {
        const char *one[1] = {path};
        if (trn_text_read_files(&docs, &n_file, one, 1, 0) != TRN_OK) {
            fprintf(stderr, "tokenizer: %s\n", trn_error_reason());
            return 2;
        }
    }
    snprintf(path, sizeof path, "%s/%s.json", dir, name);
    if (trn_tokenizer_load_hf(&tok, path) != TRN_OK) { fprintf(stderr, "tokenizer: %s\n", trn_error_reason()); return 2; }
    memcpy(&n_docs, docs, 4);
    for (r = 0; r < reps; r++) {
        size_t off = 4;
        double t0 = now_s();
        ids.n = 0;
        bytes = 0;
        for (i = 0; i < n_docs && off + 4 <= n_file; i++) {
            int32_t len;
            memcpy(&len, docs + off, 4);
            if (len < 0 || (size_t)len > n_file - off - 4) { fprintf(stderr, "tokenizer: bad docs.bin\n"); return 2; }
            if (trn_tokenizer_encode(&tok, docs + off + 4, (size_t)len, &ids) != TRN_OK) {
                fprintf(stderr, "tokenizer: %s\n", trn_error_reason());
                return 2;
            }
            off += 4 + (size_t)len;
            bytes += (size_t)len;
        }
        t[r] = now_s() - t0;
    }
    qsort(t, (size_t)reps, sizeof t[0], cmp_d);
    printf("kit %s: %.2f MB/s (%.2f .. %.2f), %zu ids, %zu bytes, %d docs\n", name, bytes / 1e6 / t[reps / 2],
           bytes / 1e6 / t[reps - 1], bytes / 1e6 / t[0], ids.n, bytes, (int)n_docs);
    trn_tokens_free(&ids);
    trn_tokenizer_free(&tok);
    trn_free(docs);
    return 0;
}
