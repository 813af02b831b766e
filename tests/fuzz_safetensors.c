/* tests/fuzz_safetensors.c - fuzz target for the safetensors reader.

   One input = one whole file. It goes through everything a reader does:
   header length, JSON header, validation, reading every float tensor,
   checksum verification, metadata into a trn_meta, and loading into a
   small model (names "a" (2,3) and "b" (4), plus optim.m/v). Invariants
   of an accepted file are asserted (abort = a finding).

   Built two ways:
   - by tests/test_fuzz.sh with clang -fsanitize=fuzzer,address,undefined
     -DTRN_LIBFUZZER: libFuzzer drives LLVMFuzzerTestOneInput;
   - by build.sh as a plain program (tests/bin/fuzz_safetensors, and an
     ASan build): it writes the seed corpus (--write-seeds DIR), replays
     files (FILE...), or runs its own small mutation loop (--mutate N) for
     machines without libFuzzer.
*/
#define TRAIN_IMPLEMENTATION
#include "train.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static trn_model fz_model;
static trn_adamw fz_opt;
static int fz_ready;

static void fz_setup(void) {
    if (fz_ready) return;
    trn_model_init(&fz_model, NULL);
    trn_param2(&fz_model, "a", 2, 3);
    trn_param1(&fz_model, "b", 4);
    if (trn_model_alloc(&fz_model) != TRN_OK) abort();
    trn_adamw_init(&fz_opt, NULL);
    fz_ready = 1;
}

#define FZ_ASSERT(c) do { if (!(c)) { fprintf(stderr, "fuzz invariant failed: %s\n", #c); abort(); } } while (0)

static void fz_check(trn_safetensors *f) {
    static trn_meta meta;
    uint64_t expect = 0;
    int i;
    /* accepted: the tensors tile the data section exactly */
    for (i = 0; i < f->n_tensors; i++) {
        const trn_st_tensor *t = &f->tensors[i];
        FZ_ASSERT(t->begin == expect && t->end >= t->begin);
        FZ_ASSERT(t->end - t->begin == t->numel * (uint64_t)t->dtype_size);
        FZ_ASSERT(t->ndim >= 0 && t->ndim <= TRN_ST_MAX_DIMS && t->name && t->dtype);
        FZ_ASSERT(trn_safetensors_find(f, t->name) != NULL);
        expect = t->end;
        if (trn__st_is_float(t) && t->numel <= (1u << 20)) {
            float *buf = (float *)malloc((size_t)t->numel * 4 + 4);
            trn_result r = trn_safetensors_read(f, t, buf);
            FZ_ASSERT(r == TRN_OK);
            free(buf);
        }
    }
    FZ_ASSERT(expect == f->data_len);
    for (i = 0; i < f->n_meta; i++) FZ_ASSERT(trn_safetensors_meta(f, f->meta_key[i]) != NULL);
    (void)trn_safetensors_verify(f);
    (void)trn__st_meta_out(f, &meta);
}

/* the model-loading path on the same bytes */
static void fz_load(trn_safetensors *f) {
    fz_setup();
    if (trn__st_check_model(f, &fz_model, 1) == TRN_OK) {
        float m[10], v[10];
        (void)trn__st_load_into(f, &fz_model, m, v, 10);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    trn_safetensors f;
    FILE *fp;
    if (size == 0) return 0; /* fmemopen refuses an empty buffer */
    fp = fmemopen((void *)data, size, "rb");
    if (!fp) return 0;
    if (trn__st_open_fp(&f, fp, "fuzz-input") == TRN_OK) {
        fz_check(&f);
        fz_load(&f);
        trn_safetensors_close(&f);
    }
    FZ_ASSERT(trn_ledger_current(TRN_HOST, TRN_KIND_TEMP) == 0); /* nothing leaked on any path */
    return 0;
}

#ifndef TRN_LIBFUZZER
/* --- without libFuzzer: seeds, replay, a small mutation loop ----------- */
static int write_file(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    int ok = f && fwrite(p, 1, n, f) == n;
    if (f && fclose(f) != 0) ok = 0;
    return ok;
}

static int craft(const char *path, const char *hdr, const void *data, size_t n) {
    size_t hl = strlen(hdr), i;
    unsigned char *b = (unsigned char *)malloc(8 + hl + n + 1);
    int ok;
    for (i = 0; i < 8; i++) b[i] = (unsigned char)((uint64_t)hl >> (8 * i));
    memcpy(b + 8, hdr, hl);
    if (n) memcpy(b + 8 + hl, data, n);
    ok = write_file(path, b, 8 + hl + n);
    free(b);
    return ok;
}

static int write_seeds(const char *dir) {
    char p[600];
    unsigned char data[64];
    trn_rng r;
    static trn_meta meta;
    int i, ok = 1;
    mkdir(dir, 0755);
    fz_setup();
    trn_rng_seed(&r, 1);
    for (i = 0; i < fz_model.n_params; i++) trn_init_normal(&fz_model, fz_model.params[i], 0, 1, &r);
    trn_meta_set(&meta, "config", "{\"n\": 1}");
    snprintf(p, sizeof p, "%s/weights.safetensors", dir);
    ok &= trn_safetensors_save(p, &fz_model, &meta) == TRN_OK;
    trn_model_alloc_grads(&fz_model);
    trn_adamw_step(&fz_opt, &fz_model, 1e-3f);
    snprintf(p, sizeof p, "%s/checkpoint.safetensors", dir);
    ok &= trn_checkpoint_save(p, &fz_model, &fz_opt, &meta) == TRN_OK;
    for (i = 0; i < 64; i++) data[i] = (unsigned char)(i * 37);
    snprintf(p, sizeof p, "%s/foreign.safetensors", dir);
    ok &= craft(p, "{ \"__metadata__\" : null ,\n\t\"half\" : {\"shape\": [2, 4], \"extra\": {\"x\": [1, -2.5e+3, true, "
                   "false, null, \"s\\u00e9\", {}]}, \"dtype\": \"F16\", \"data_offsets\": [0, 16]},"
                   "\"b\\u00e9\\ud83d\\ude00\\n\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[16,22]},"
                   "\"ids\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[22,30]},"
                   "\"scalar\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[30,34]},"
                   "\"empty\":{\"dtype\":\"F32\",\"shape\":[0,3],\"data_offsets\":[34,34]}}   ", data, 34);
    snprintf(p, sizeof p, "%s/empty.safetensors", dir);
    ok &= craft(p, "{}", data, 0);
    snprintf(p, sizeof p, "%s/meta.safetensors", dir);
    ok &= craft(p, "{\"__metadata__\":{\"format\":\"pt\",\"k\\\"\":\"v\\\\\"}}", data, 0);
    snprintf(p, sizeof p, "%s/ab.safetensors", dir);
    ok &= craft(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
                   "\"b\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[24,32]}}", data, 32);
    if (!ok) fprintf(stderr, "fuzz_safetensors: could not write seeds to %s: %s\n", dir, trn_error_reason());
    return ok ? 0 : 2;
}

/* a few random edits of a seed: flips, interesting bytes, inserts,
   deletes, truncation, and sometimes a header length that fits again */
static const unsigned char fz_interesting[] = {0, '"', '\\', '{', '}', '[', ']', ',', ':', '0', '9', '-', 'e',
                                               '.', 'u', ' ', 0x7f, 0x80, 0xc3, 0xed, 0xf4, 0xff};
static size_t st_mutate(unsigned char *b, size_t n, size_t cap, trn_rng *r) {
    int k, edits = 1 + (int)trn_rng_below(r, 4);
    for (k = 0; k < edits && n > 0; k++) {
        size_t at = trn_rng_below(r, (uint32_t)n);
        switch (trn_rng_below(r, 6)) {
        case 0: b[at] ^= (unsigned char)(1u << trn_rng_below(r, 8)); break;
        case 1: b[at] = fz_interesting[trn_rng_below(r, sizeof fz_interesting)]; break;
        case 2: if (n < cap) { memmove(b + at + 1, b + at, n - at); b[at] = fz_interesting[trn_rng_below(r, sizeof fz_interesting)]; n++; } break;
        case 3: memmove(b + at, b + at + 1, n - at - 1); n--; break;
        case 4: n = at + 1; break;
        default: if (at >= 8 && at < 16) b[at] = (unsigned char)trn_rng_next(r); break;
        }
    }
    if (n > 8 && trn_rng_below(r, 2)) { /* point the header length at the last '}' */
        size_t i, end = 0;
        for (i = 8; i < n; i++) if (b[i] == '}') end = i + 1;
        if (end) for (i = 0; i < 8; i++) b[i] = (unsigned char)((uint64_t)(end - 8) >> (8 * i));
    }
    return n;
}

/* the seeds in memory: written to a temporary folder and read back */
static unsigned char *fz_read_file(const char *path, size_t *n);
static int fz_seeds(unsigned char **seed, size_t *len) {
    char dir[] = "/tmp/trn_fuzz_seeds_XXXXXX", p[600];
    const char *names[] = {"weights", "checkpoint", "foreign", "empty", "meta", "ab"};
    int i, ok = 1;
    if (!mkdtemp(dir) || write_seeds(dir) != 0) return -1;
    for (i = 0; i < 6; i++) {
        snprintf(p, sizeof p, "%s/%s.safetensors", dir, names[i]);
        seed[i] = fz_read_file(p, &len[i]);
        remove(p);
        if (!seed[i]) { fprintf(stderr, "fuzz_safetensors: bad seed %s\n", p); ok = 0; }
    }
    rmdir(dir);
    return ok ? 6 : -1;
}

/* the shared main: --write-seeds, --mutate, replay (tests/fuzz_main.h) */
#define FZ_NAME "fuzz_safetensors"
#define FZ_CAP (1 << 16)
#define FZ_MUTATE st_mutate
#include "tests/fuzz_main.h"
#endif
