/* tools/export_common.h - what the exporters (export_hf.c, export_gguf.c)
   share: one-line errors and typed reads of a checkpoint's metadata (the
   gpt2.* / llama.* keys examples/gpt2 and examples/llama write). Define
   EXPORT_PROG (the program's name, for messages) before including it,
   after train.h. */
#ifndef EXPORT_COMMON_H
#define EXPORT_COMMON_H
#ifndef EXPORT_PROG
#error "define EXPORT_PROG (the program's name) before including tools/export_common.h"
#endif

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* "PROG: " + the message, exit status 2 (bad input) */
static void die(const char *fmt, const char *a, const char *b) {
    fprintf(stderr, EXPORT_PROG ": ");
    fprintf(stderr, fmt, a, b);
    fputc('\n', stderr);
    exit(2);
}
/* a count from the metadata: a decimal integer in [0, 1e8]; -1 if absent or anything else */
static long meta_long(const trn_safetensors *f, const char *key) {
    const char *v = trn_safetensors_meta(f, key);
    char *end;
    long x;
    if (!v) return -1;
    x = strtol(v, &end, 10);
    return (*end || end == v || x < 0 || x > 100000000) ? -1 : x;
}
/* a number from the metadata, dflt if absent */
static double meta_double(const trn_safetensors *f, const char *key, double dflt) {
    const char *v = trn_safetensors_meta(f, key);
    return v ? atof(v) : dflt;
}
#endif
