/* tests/fuzz_main.h - the plain-program main() the fuzz targets share
   (tests/fuzz_*.c built by build.sh, without libFuzzer):

      fuzz_x --write-seeds DIR    the target's seed inputs, as files
      fuzz_x --mutate N           N inputs made by a few random edits of a
                                  seed (flips, interesting bytes, inserts,
                                  deletes, truncation), each run once
      fuzz_x FILE...              replay inputs (a crash libFuzzer found)

   tests/test_fuzz.sh builds the same targets with clang
   -fsanitize=fuzzer -DTRN_LIBFUZZER, where libFuzzer brings main() and
   this file is not included. A target includes it last, after defining:

      FZ_NAME         "fuzz_x", for messages
      FZ_CAP          bytes a mutated input may grow to
      LLVMFuzzerTestOneInput(data, size)
      static int write_seeds(const char *dir);           0, or 2: failed
      static int fz_seeds(unsigned char **seed, size_t *len);
                      the seeds in memory (malloc'd), at most FZ_MAX_SEEDS;
                      returns how many, or < 0: failed
      static const unsigned char fz_interesting[];       bytes edits write

   and, for edits of its own (a format with a length field), FZ_MUTATE:
   the name of its function with fz_mutate's signature. A target whose
   seeds are strings (const char *const seeds[]) defines instead of the two
   functions FZ_STRING_SEEDS (the array) and FZ_SEED_FILE (a file name
   pattern with one %d), and this file writes and copies them. */
#ifndef FUZZ_MAIN_H
#define FUZZ_MAIN_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define FZ_MAX_SEEDS 16

#ifdef FZ_STRING_SEEDS
#define FZ_N_STRING_SEEDS (int)(sizeof FZ_STRING_SEEDS / sizeof FZ_STRING_SEEDS[0])
/* the string seeds as files DIR/<FZ_SEED_FILE with the seed's index> */
static int write_seeds(const char *dir) {
    char p[600];
    int i, ok = 1;
    mkdir(dir, 0755);
    for (i = 0; i < FZ_N_STRING_SEEDS; i++) {
        FILE *f;
        size_t n = strlen(FZ_STRING_SEEDS[i]);
        snprintf(p, sizeof p, "%s/" FZ_SEED_FILE, dir, i);
        f = fopen(p, "wb");
        if (!f || fwrite(FZ_STRING_SEEDS[i], 1, n, f) != n) ok = 0;
        if (f && fclose(f) != 0) ok = 0;
    }
    if (!ok) fprintf(stderr, "%s: could not write seeds to %s\n", FZ_NAME, dir);
    return ok ? 0 : 2;
}
static int fz_seeds(unsigned char **seed, size_t *len) {
    int i;
    for (i = 0; i < FZ_N_STRING_SEEDS && i < FZ_MAX_SEEDS; i++) {
        len[i] = strlen(FZ_STRING_SEEDS[i]);
        if (!(seed[i] = (unsigned char *)malloc(len[i] + 1))) return -1;
        memcpy(seed[i], FZ_STRING_SEEDS[i], len[i]);
    }
    return i;
}
#endif

/* a few random edits of b[0..n) (room for cap bytes); the new length */
static size_t fz_mutate(unsigned char *b, size_t n, size_t cap, trn_rng *r) {
    int k, edits = 1 + (int)trn_rng_below(r, 4);
    const uint32_t n_int = (uint32_t)sizeof fz_interesting;
    for (k = 0; k < edits && n > 0; k++) {
        size_t at = trn_rng_below(r, (uint32_t)n);
        switch (trn_rng_below(r, 5)) {
        case 0: b[at] ^= (unsigned char)(1u << trn_rng_below(r, 8)); break;
        case 1: b[at] = fz_interesting[trn_rng_below(r, n_int)]; break;
        case 2: if (n < cap) { memmove(b + at + 1, b + at, n - at); b[at] = fz_interesting[trn_rng_below(r, n_int)]; n++; } break;
        case 3: memmove(b + at, b + at + 1, n - at - 1); n--; break;
        default: n = at + 1; break;
        }
    }
    return n;
}
#ifndef FZ_MUTATE
#define FZ_MUTATE fz_mutate
#endif

/* a whole file into malloc'd memory (one spare byte); NULL: unreadable */
static unsigned char *fz_read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    unsigned char *p = NULL;
    long sz;
    if (!f) return NULL;
    if (fseek(f, 0, SEEK_END) == 0 && (sz = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0) {
        p = (unsigned char *)malloc((size_t)sz + 1);
        if (p) *n = fread(p, 1, (size_t)sz, f);
    }
    fclose(f);
    return p;
}

int main(int argc, char **argv) {
    int i;
    if (argc == 3 && strcmp(argv[1], "--write-seeds") == 0) return write_seeds(argv[2]);
    if (argc >= 2 && strcmp(argv[1], "--help") == 0) {
        printf("usage: %s --write-seeds DIR | --mutate N | FILE...\n", FZ_NAME);
        return 0;
    }
    if (argc == 3 && strcmp(argv[1], "--mutate") == 0) {
        unsigned char *seed[FZ_MAX_SEEDS], *buf = (unsigned char *)malloc(FZ_CAP);
        size_t len[FZ_MAX_SEEDS];
        long long runs = atoll(argv[2]), it;
        int n_seeds = fz_seeds(seed, len);
        trn_rng r;
        if (!buf || n_seeds <= 0) { fprintf(stderr, "%s: no seeds\n", FZ_NAME); return 2; }
        for (i = 0; i < n_seeds; i++)
            if (len[i] > FZ_CAP) { fprintf(stderr, "%s: seed %d is larger than %d bytes\n", FZ_NAME, i, (int)FZ_CAP); return 2; }
        trn_rng_seed(&r, 12345);
        for (it = 0; it < runs; it++) {
            int s = (int)trn_rng_below(&r, (uint32_t)n_seeds);
            size_t n;
            memcpy(buf, seed[s], len[s]);
            n = FZ_MUTATE(buf, len[s], FZ_CAP, &r);
            LLVMFuzzerTestOneInput(buf, n);
        }
        printf("%s: %lld mutated inputs, no crash\n", FZ_NAME, runs);
        for (i = 0; i < n_seeds; i++) free(seed[i]);
        free(buf);
        return 0;
    }
    for (i = 1; i < argc; i++) {
        size_t n = 0;
        unsigned char *p = fz_read_file(argv[i], &n);
        if (!p) { fprintf(stderr, "%s: cannot read %s\n", FZ_NAME, argv[i]); return 2; }
        LLVMFuzzerTestOneInput(p, n);
        free(p);
    }
    printf("%s: replayed %d inputs, no crash\n", FZ_NAME, argc - 1);
    return 0;
}
#endif /* FUZZ_MAIN_H */
