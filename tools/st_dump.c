/* tools/st_dump.c - what is inside a safetensors file: metadata, tensors
   (dtype, shape, bytes, offsets), and whether its trn.crc32c checks out.
   Works on any safetensors file (Hugging Face's model.safetensors too) and
   on train.h's weights and training checkpoints.

     tools/st_dump FILE                 header, metadata, tensor table, checksum
     tools/st_dump --values 4 FILE      also the first 4 values of each float tensor
     tools/st_dump --latest DIR         which checkpoint of a run directory a
                                        resume would pick (skipping broken ones)
   Exit status: 0 fine, 1 checksum mismatch, 2 unreadable or malformed file.
*/
#define TRAIN_IMPLEMENTATION
#include "train.h"
#include "extras/train_run.h" // trn_checkpoint_latest

#include <stdlib.h>

static void usage(FILE *to) {
    fprintf(to, "usage: st_dump [--values N] FILE\n"
                "       st_dump --latest DIR\n");
}

int main(int argc, char **argv) {
    trn_safetensors f;
    const char *path = NULL;
    int values = 0, i, k;
    trn_result r;
    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) { usage(stdout); return 0; }
        if (strcmp(argv[i], "--latest") == 0 && i + 1 < argc) {
            char found[1200];
            long long step;
            r = trn_checkpoint_latest(argv[i + 1], found, sizeof found, &step);
            if (r != TRN_OK) { fprintf(stderr, "st_dump: %s\n", trn_error_reason()); return 2; }
            printf("%s (step %lld)\n", found, step);
            return 0;
        }
        if (strcmp(argv[i], "--values") == 0 && i + 1 < argc) { values = atoi(argv[++i]); continue; }
        if (argv[i][0] == '-' || path) { fprintf(stderr, "st_dump: unexpected argument %s\n", argv[i]); usage(stderr); return 2; }
        path = argv[i];
    }
    if (!path) { usage(stderr); return 2; }
    if ((r = trn_safetensors_open(&f, path)) != TRN_OK) {
        fprintf(stderr, "st_dump: %s (%s)\n", trn_error_reason(), trn_result_string(r));
        return 2;
    }
    printf("%s: header %llu bytes, data %llu bytes, %d tensors\n", path, (unsigned long long)f.header_len,
           (unsigned long long)f.data_len, f.n_tensors);
    if (f.n_meta) printf("metadata:\n");
    for (i = 0; i < f.n_meta; i++) printf("  %-24s %s\n", f.meta_key[i], f.meta_val[i]);
    printf("tensors (in data order):\n");
    for (i = 0; i < f.n_tensors; i++) {
        const trn_st_tensor *t = &f.tensors[i];
        char shape[200];
        size_t n = 0;
        shape[0] = 0;
        n += (size_t)snprintf(shape, sizeof shape, "(");
        for (k = 0; k < t->ndim && n < sizeof shape; k++)
            n += (size_t)snprintf(shape + n, sizeof shape - n, k ? ",%lld" : "%lld", (long long)t->shape[k]);
        if (n < sizeof shape) snprintf(shape + n, sizeof shape - n, ")");
        printf("  %-32s %-5s %-18s %12llu bytes at %llu\n", t->name, t->dtype, shape,
               (unsigned long long)(t->end - t->begin), (unsigned long long)t->begin);
        if (values > 0 && t->numel && t->numel <= ((uint64_t)1 << 28) &&
            (strcmp(t->dtype, "F32") == 0 || strcmp(t->dtype, "F16") == 0 || strcmp(t->dtype, "BF16") == 0)) {
            float *buf = (float *)malloc((size_t)t->numel * sizeof(float));
            if (buf && trn_safetensors_read(&f, t, buf) == TRN_OK) {
                printf("    ");
                for (k = 0; k < values && (uint64_t)k < t->numel; k++) printf(" %.9g", buf[k]);
                printf("%s\n", (uint64_t)values < t->numel ? " ..." : "");
            }
            free(buf);
        }
    }
    if (!f.has_crc) {
        printf("checksum: none (not written by train.h)\n");
        r = TRN_OK;
    } else if ((r = trn_safetensors_verify(&f)) == TRN_OK) {
        printf("checksum: ok (crc32c %08x)\n", (unsigned)f.crc_stored);
    } else {
        printf("checksum: BAD: %s\n", trn_error_reason());
    }
    trn_safetensors_close(&f);
    return r == TRN_OK ? 0 : r == TRN_ERR_CHECKSUM ? 1 : 2;
}
