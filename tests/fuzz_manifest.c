/* tests/fuzz_manifest.c - fuzz target for the sharded checkpoint manifest
   (train_nccl.h's DIR/manifest.json, read by --resume, by
   trn_ddp_checkpoint_load_sharded and by tools/consolidate).

   One input = one manifest's text. It goes through what the readers do:
   the header fields (format, save id, world size, parameter count), the
   check of the parameter table against a small model (names "h.0.w" (4,3),
   "h.0.b" (4), "head" (2,4)), and consolidate's reading of the table into
   a model of its own. Invariants of an accepted manifest are asserted
   (abort = a finding); nothing may crash, leak or exit.

   Built two ways, as tests/fuzz_safetensors.c:
   - by tests/test_fuzz.sh with clang -fsanitize=fuzzer,address,undefined
     -DTRN_LIBFUZZER;
   - by build.sh as a plain program: --write-seeds DIR, FILE... (replay),
     --mutate N (its own small mutation loop, without libFuzzer).
*/
// build: -pthread
#define TRAIN_IMPLEMENTATION
#include "train.h"
#define TRAIN_NCCL_CPU_ONLY
#define TRAIN_NCCL_IMPLEMENTATION
#include "train_nccl.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static trn_model fz_model;
static int fz_ready;

static void fz_setup(void) {
    if (fz_ready) return;
    trn_model_init(&fz_model, NULL);
    trn_param2(&fz_model, "h.0.w", 4, 3);
    trn_param1(&fz_model, "h.0.b", 4);
    trn_param2(&fz_model, "head", 2, 4);
    fz_ready = 1;
}

#define FZ_ASSERT(c) do { if (!(c)) { fprintf(stderr, "fuzz invariant failed: %s\n", #c); abort(); } } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text;
    trn__manifest mf;
    trn_model t;
    int i, p;
    fz_setup();
    if (!(text = (char *)malloc(size + 1))) return 0;
    memcpy(text, data, size);
    text[size] = 0; /* the reader refuses a NUL inside; a prefix stands for that */
    if (trn__sharded_parse(text, "fuzz", NULL, &mf) == TRN_OK) {
        FZ_ASSERT(mf.world >= 1 && mf.world <= 99999 && mf.n_floats >= 1);
        FZ_ASSERT(strlen(mf.save_id) == 16);
        for (i = 0; i < 16; i++) FZ_ASSERT(isxdigit((unsigned char)mf.save_id[i]));
    }
    if (trn__sharded_parse(text, "fuzz", &fz_model, &mf) == TRN_OK) FZ_ASSERT(mf.n_floats == fz_model.n_floats);
    trn_model_init(&t, NULL);
    if (trn__sharded_table(text, "fuzz", &t) == TRN_OK) { /* declared in order, no gap */
        size_t off = 0;
        for (p = 0; p < t.n_params; p++) {
            FZ_ASSERT(t.params[p]->offset == off && t.params[p]->size >= 1);
            off += t.params[p]->size;
        }
        FZ_ASSERT(off == t.n_floats);
    }
    trn_model_free(&t);
    free(text);
    FZ_ASSERT(trn_ledger_current(TRN_HOST, TRN_KIND_TEMP) == 0);
    return 0;
}

#ifndef TRN_LIBFUZZER
/* --- without libFuzzer: seeds, replay, a small mutation loop ----------- */
static const char *const seeds[] = {
    /* what trn_ddp_checkpoint_save_sharded writes for fz_model at 2 ranks */
    "{\n  \"format\": \"train.h sharded checkpoint 2\",\n  \"save_id\": \"0123456789abcdef\",\n  \"world_size\": 2,\n"
    "  \"n_floats\": 24,\n  \"mode\": \"fsdp\",\n  \"files\": [\n"
    "    {\"file\": \"rank-00000-of-00002.safetensors\", \"lo\": 0, \"hi\": 12},\n"
    "    {\"file\": \"rank-00001-of-00002.safetensors\", \"lo\": 12, \"hi\": 24}\n  ],\n  \"params\": [\n"
    "    {\"name\": \"h.0.w\", \"offset\": 0, \"shape\": [4, 3]},\n    {\"name\": \"h.0.b\", \"offset\": 12, \"shape\": [4]},\n"
    "    {\"name\": \"head\", \"offset\": 16, \"shape\": [2, 4]}\n  ]\n}\n",
    /* an older train.h's (format 1, no save id): refused */
    "{\"format\": \"train.h sharded checkpoint 1\", \"world_size\": 1, \"n_floats\": 4, \"params\": [{\"name\": \"b\", "
    "\"offset\": 0, \"shape\": [4]}]}",
    /* a gap, a huge shape, a duplicate */
    "{\"format\": \"train.h sharded checkpoint 2\", \"save_id\": \"ffffffffffffffff\", \"world_size\": 99999, \"n_floats\": "
    "18446744073709551615, \"params\": [{\"name\": \"a\", \"offset\": 0, \"shape\": [2147483647, 2147483647]}, {\"name\": "
    "\"a\", \"offset\": 3, \"shape\": [1]}]}"};

/* the shared main: --write-seeds, --mutate, replay (tests/fuzz_main.h) */
#define FZ_NAME "fuzz_manifest"
#define FZ_CAP 4096
#define FZ_STRING_SEEDS seeds
#define FZ_SEED_FILE "manifest%d.json"
static const unsigned char fz_interesting[] = {'"', '\\', '{', '}', '[', ']', ',', ':', ' ', '0', '1', '9', '-',
                                               '+', 'e', 'f', 'x', 0x80, 0xff};
#include "tests/fuzz_main.h"
#endif
