/* tests/test_checkpoint.c - safetensors files and training-state checkpoints.

   Round trips are exact to the bit; each kind of damage (truncated,
   bit-flipped, wrong shape, wrong model, not safetensors) gives its exact
   result code and a reason naming the file; a hand-written set of headers
   exercises every rule of the parser; run directories keep the last K and
   resume from the newest valid checkpoint; the ledger shows that saving
   allocates no model-sized temporary.

   Modes for tests/test_safetensors_py.sh (Python interop):
     test_checkpoint --write-py FILE   write a weights file with known values
     test_checkpoint --read-py FILE    check a file written by Python
*/
#define TRAIN_IMPLEMENTATION
#include "train.h"
#include "extras/train_run.h"
#include "tests/check.h"

#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

static char tmpdir[256];

static const char *tpath(const char *name) {
    static char buf[8][512];
    static int k;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, name);
    return buf[k];
}

/* unlink first: rewriting a file in place makes ext4 flush it on close
   (auto_da_alloc), which costs milliseconds per file */
static int write_bytes(const char *path, const void *p, size_t n) {
    FILE *f;
    unlink(path);
    f = fopen(path, "wb");
    if (!f) return 0;
    if (n && fwrite(p, 1, n, f) != n) { fclose(f); return 0; }
    return fclose(f) == 0;
}

static unsigned char *read_bytes(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    unsigned char *p;
    long sz;
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    p = (unsigned char *)malloc((size_t)sz + 1);
    *n = fread(p, 1, (size_t)sz, f);
    fclose(f);
    return p;
}

/* a safetensors file from a header text and raw data (no padding added) */
static int craft(const char *path, const char *header, const void *data, size_t n) {
    size_t hl = strlen(header), i;
    unsigned char *buf = (unsigned char *)malloc(8 + hl + n + 1);
    int ok;
    for (i = 0; i < 8; i++) buf[i] = (unsigned char)((uint64_t)hl >> (8 * i));
    memcpy(buf + 8, header, hl);
    if (n) memcpy(buf + 8 + hl, data, n);
    ok = write_bytes(path, buf, 8 + hl + n);
    free(buf);
    return ok;
}

static int reason_has(const char *s) { return strstr(trn_error_reason(), s) != NULL; }

/* a small model: variant 0 is the reference; 1 changes a shape; 2 renames
   a tensor; 3 drops one; scale > 1 makes "big" larger */
static void make_model(trn_model *m, int variant, int big, uint64_t seed) {
    trn_rng rng;
    int i;
    trn_model_init(m, NULL);
    trn_param2(m, "embed.weight", 10, 8);
    trn_param2(m, variant == 2 ? "h.0.w_renamed" : "h.0.w", 16, 8);
    trn_param1(m, "h.0.b", variant == 1 ? 15 : 16);
    if (variant != 3) trn_param2(m, "head.w", 4, 16);
    trn_param1(m, "big", big);
    if (trn_model_alloc(m) != TRN_OK) trn_fatal("make_model: %s", trn_error_reason());
    trn_rng_seed(&rng, seed);
    for (i = 0; i < m->n_params; i++) trn_init_normal(m, m->params[i], 0.0f, 1.0f, &rng);
}

static int same_bits(const void *a, const void *b, size_t bytes) { return memcmp(a, b, bytes) == 0; }

/* a few AdamW steps with made-up gradients, so m and v hold something */
static void fake_train(trn_model *m, trn_adamw *opt, int steps, uint64_t seed) {
    trn_rng rng;
    size_t i;
    int s;
    trn_rng_seed(&rng, seed);
    trn_model_alloc_grads(m);
    for (s = 0; s < steps; s++) {
        for (i = 0; i < m->n_floats; i++) m->grad_data[i] = trn_rng_normal(&rng);
        trn_adamw_step(opt, m, 1e-2f);
    }
}

/* ---------------------------------------------------------------------- */
static void test_crc(void) {
    unsigned char buf[1000];
    size_t i;
    trn_rng rng;
    CHECK(trn_crc32c(0, "123456789", 9) == 0xE3069283u, "crc32c check value: %08x", trn_crc32c(0, "123456789", 9));
    CHECK(trn__crc32c_sw(0, "123456789", 9) == 0xE3069283u, "table crc32c check value");
    trn_rng_seed(&rng, 1);
    for (i = 0; i < sizeof buf; i++) buf[i] = (unsigned char)trn_rng_next(&rng);
    for (i = 0; i < 40; i++) {
        size_t off = i % 9, n = sizeof buf - 9 - i * 7;
        uint32_t a = trn_crc32c(0, buf + off, n), b = trn__crc32c_sw(0, buf + off, n);
        uint32_t c = trn_crc32c(trn_crc32c(0, buf + off, n / 3), buf + off + n / 3, n - n / 3);
        if (a != b || a != c) { CHECK(0, "crc32c fast/table/chained disagree at offset %zu len %zu", off, n); return; }
    }
    CHECK(1, "crc32c fast == table == chained");
}

static void test_meta(void) {
    static trn_meta meta;
    static const double vals[] = {0.1, 1.0 / 3.0, -0.0, 1e-310, 1.7976931348623157e308, 3e-4, 0.9990000128746033};
    uint64_t u = 0;
    double d = 0;
    size_t i;
    trn_meta_set_u64(&meta, "u", UINT64_MAX);
    CHECK(trn_meta_get_u64(&meta, "u", &u) == TRN_OK && u == UINT64_MAX, "u64 max round trip");
    trn_meta_set_u64(&meta, "u", 42);
    CHECK(meta.n == 1 && trn_meta_get_u64(&meta, "u", &u) == TRN_OK && u == 42, "set replaces");
    for (i = 0; i < sizeof vals / sizeof vals[0]; i++) {
        trn_meta_set_f64(&meta, "d", vals[i]);
        CHECK(trn_meta_get_f64(&meta, "d", &d) == TRN_OK && same_bits(&d, &vals[i], sizeof d), "f64 %.17g exact", vals[i]);
    }
    { float f = 0.999f; double dd; trn_meta_set_f64(&meta, "f", f); trn_meta_get_f64(&meta, "f", &dd);
      CHECK((float)dd == f, "float through f64 exact"); }
    CHECK(trn_meta_get_u64(&meta, "nope", &u) == TRN_ERR_MISMATCH, "missing key is MISMATCH");
    trn_meta_set(&meta, "s", "12x");
    CHECK(trn_meta_get_u64(&meta, "s", &u) == TRN_ERR_FORMAT, "non-number is FORMAT");
    CHECK(trn_meta_get_f64(&meta, "s", &d) == TRN_ERR_FORMAT, "non-number f64 is FORMAT");
    trn_meta_set(&meta, "s", "18446744073709551616");
    CHECK(trn_meta_get_u64(&meta, "s", &u) == TRN_ERR_FORMAT, "u64 overflow is FORMAT");
    CHECK(trn_meta_get(&meta, "s") && strcmp(trn_meta_get(&meta, "s"), "18446744073709551616") == 0, "get string");
}

static void test_weights_roundtrip(void) {
    trn_model a, b;
    static trn_meta meta, back;
    const char *p = tpath("w.safetensors");
    size_t saved = trn__st_staging;
    int pass;
    make_model(&a, 0, 5000, 7);
    trn_meta_set(&meta, "config", "{\"n_layer\": 1, \"name\": \"t\\u00e9st\"}");
    trn_meta_set(&meta, "quote\"key", "tab\tnewline\nbackslash\\ unicode \xc3\xa9\xe2\x9c\x93");
    trn_meta_set(&meta, "trn.ignored", "the kit's key space");
    for (pass = 0; pass < 2; pass++) {
        trn__st_staging = pass ? 256 : saved; /* pass 1: many small chunks */
        CHECK(trn_safetensors_save(p, &a, &meta) == TRN_OK, "save: %s", trn_error_reason());
        make_model(&b, 0, 5000, 99);
        CHECK(trn_safetensors_load(p, &b, &back) == TRN_OK, "load: %s", trn_error_reason());
        CHECK(same_bits(a.param_data, b.param_data, a.n_floats * 4), "weights round trip bit-exact (pass %d)", pass);
        CHECK(back.n == 2, "meta: only the caller's keys come back (got %d)", back.n);
        CHECK(trn_meta_get(&back, "config") && strcmp(trn_meta_get(&back, "config"), trn_meta_get(&meta, "config")) == 0,
              "config round trip");
        CHECK(trn_meta_get(&back, "quote\"key") &&
              strcmp(trn_meta_get(&back, "quote\"key"), trn_meta_get(&meta, "quote\"key")) == 0, "escaped meta round trip");
        trn_model_free(&b);
    }
    trn__st_staging = saved;
    { /* the generic reader sees the same values, names and file layout */
        trn_safetensors f;
        const trn_st_tensor *t;
        float *host = (float *)malloc(5000 * sizeof(float));
        CHECK(trn_safetensors_open(&f, p) == TRN_OK, "open: %s", trn_error_reason());
        CHECK(f.n_tensors == 5 && f.data_start % 8 == 0, "5 tensors, data 8-aligned");
        t = trn_safetensors_find(&f, "h.0.w");
        CHECK(t && t->ndim == 2 && t->shape[0] == 16 && t->shape[1] == 8 && strcmp(t->dtype, "F32") == 0, "find h.0.w");
        t = trn_safetensors_find(&f, "big");
        CHECK(t && trn_safetensors_read(&f, t, host) == TRN_OK &&
              same_bits(host, trn_model_find(&a, "big")->data, 5000 * 4), "read big");
        CHECK(trn_safetensors_find(&f, "nope") == NULL, "find missing -> NULL");
        CHECK(trn_safetensors_meta(&f, "format") && strcmp(trn_safetensors_meta(&f, "format"), "pt") == 0, "format pt");
        CHECK(trn_safetensors_verify(&f) == TRN_OK, "verify: %s", trn_error_reason());
        trn_safetensors_close(&f);
        free(host);
    }
    trn_model_free(&a);
}

static void test_checkpoint_roundtrip(void) {
    trn_model a, b;
    trn_adamw oa, ob;
    trn_adamw_desc d;
    static trn_meta meta, back;
    const char *p = tpath("c.safetensors");
    uint64_t u;
    memset(&d, 0, sizeof d);
    d.lr = 3e-4f; d.beta2 = 0.95f; d.weight_decay = 0.1f;
    make_model(&a, 0, 300, 1);
    trn_adamw_init(&oa, &d);
    fake_train(&a, &oa, 5, 11);
    trn_meta_set_u64(&meta, "rng", 0xDEADBEEFCAFEF00Dull);
    trn_meta_set_u64(&meta, "loader.pos", 12345);
    CHECK(trn_checkpoint_save(p, &a, &oa, &meta) == TRN_OK, "checkpoint save: %s", trn_error_reason());

    make_model(&b, 0, 300, 2);
    trn_adamw_init(&ob, NULL);
    CHECK(trn_checkpoint_load(p, &b, &ob, &back) == TRN_OK, "checkpoint load: %s", trn_error_reason());
    CHECK(same_bits(a.param_data, b.param_data, a.n_floats * 4), "weights exact");
    CHECK(ob.m && ob.v && same_bits(oa.m, ob.m, a.n_floats * 4) && same_bits(oa.v, ob.v, a.n_floats * 4), "m, v exact");
    CHECK(ob.step == 5 && ob.lo == oa.lo && ob.hi == oa.hi, "step %lld, slice", ob.step);
    CHECK(same_bits(&oa.desc, &ob.desc, sizeof oa.desc), "hyperparameters exact");
    CHECK(trn_meta_get_u64(&back, "rng", &u) == TRN_OK && u == 0xDEADBEEFCAFEF00Dull, "rng state");
    CHECK(trn_meta_get_u64(&back, "loader.pos", &u) == TRN_OK && u == 12345, "loader position");
    /* the restored run continues exactly like the original */
    fake_train(&a, &oa, 3, 77);
    fake_train(&b, &ob, 3, 77);
    CHECK(same_bits(a.param_data, b.param_data, a.n_floats * 4) && same_bits(oa.m, ob.m, a.n_floats * 4),
          "three more steps after resume are bit-identical");
    /* load into an optimizer that already has moments (same slice) */
    CHECK(trn_checkpoint_load(p, &b, &ob, NULL) == TRN_OK && ob.step == 5, "load over existing moments");
    /* weights only (opt NULL): moments in the file are skipped */
    CHECK(trn_checkpoint_load(p, &b, NULL, NULL) == TRN_OK, "load weights only: %s", trn_error_reason());
    /* a checkpoint saved before the first step has no moments */
    {
        trn_model c;
        trn_adamw oc, od;
        make_model(&c, 0, 300, 3);
        trn_adamw_init(&oc, NULL);
        CHECK(trn_checkpoint_save(tpath("c0.safetensors"), &c, &oc, NULL) == TRN_OK, "save at step 0");
        CHECK(trn_checkpoint_load(tpath("c0.safetensors"), &b, &ob, NULL) == TRN_OK && ob.m == NULL && ob.step == 0,
              "load step-0 checkpoint frees moments");
        trn_adamw_init(&od, NULL);
        fake_train(&c, &oc, 2, 5);
        fake_train(&b, &od, 2, 5);
        CHECK(same_bits(c.param_data, b.param_data, c.n_floats * 4), "step-0 resume continues exactly");
        trn_adamw_free(&oc); trn_adamw_free(&od);
        trn_model_free(&c);
    }
    /* a weights file is not a training checkpoint, and vice versa */
    CHECK(trn_safetensors_save(tpath("w2.safetensors"), &a, NULL) == TRN_OK, "save weights");
    CHECK(trn_checkpoint_load(tpath("w2.safetensors"), &b, &ob, NULL) == TRN_ERR_FORMAT && reason_has("w2.safetensors"),
          "weights file as checkpoint -> FORMAT: %s", trn_error_reason());
    CHECK(trn_safetensors_load(p, &b, NULL) == TRN_ERR_MISMATCH && reason_has("optim.m"),
          "checkpoint via safetensors_load -> MISMATCH (extra optim.m): %s", trn_error_reason());
    trn_adamw_free(&oa); trn_adamw_free(&ob);
    trn_model_free(&a); trn_model_free(&b);
}

/* ---------------------------------------------------------------------- */
static void test_corruption(void) {
    trn_model a, b;
    trn_adamw oa, ob;
    static trn_meta meta;
    const char *p = tpath("good.safetensors"), *q = tpath("bad.safetensors");
    unsigned char *good, *bad;
    size_t n = 0, i, hl;
    int bit, accepted = 0, tried = 0, counts[16] = {0};
    trn_result r;

    make_model(&a, 0, 20, 5);
    trn_adamw_init(&oa, NULL);
    fake_train(&a, &oa, 2, 6);
    trn_meta_set_u64(&meta, "rng", 987654321);
    CHECK(trn_checkpoint_save(p, &a, &oa, &meta) == TRN_OK, "save: %s", trn_error_reason());
    good = read_bytes(p, &n);
    hl = 0;
    for (i = 0; i < 8; i++) hl |= (size_t)good[i] << (8 * i);
    make_model(&b, 0, 20, 9);
    trn_adamw_init(&ob, NULL);

    CHECK(trn_checkpoint_load(tpath("missing.safetensors"), &b, &ob, NULL) == TRN_ERR_IO && reason_has("missing.safetensors"),
          "missing file -> IO: %s", trn_error_reason());
    CHECK(trn_checkpoint_load(tmpdir, &b, &ob, NULL) == TRN_ERR_IO, "a directory -> IO: %s", trn_error_reason());
    write_bytes(q, "", 0);
    CHECK(trn_checkpoint_load(q, &b, &ob, NULL) == TRN_ERR_FORMAT && reason_has(q), "empty -> FORMAT: %s", trn_error_reason());
    write_bytes(q, "hello, this is a text file and not safetensors\n", 47);
    CHECK(trn_checkpoint_load(q, &b, &ob, NULL) == TRN_ERR_FORMAT && reason_has("not a safetensors file"),
          "text -> FORMAT: %s", trn_error_reason());
    write_bytes(q, "\x89PNG\r\n\x1a\n\0\0\0\rIHDR", 16);
    CHECK(trn_safetensors_load(q, &b, NULL) == TRN_ERR_FORMAT, "png -> FORMAT: %s", trn_error_reason());

    /* truncated anywhere: FORMAT, and the message says so */
    {
        size_t cuts[] = {4, 8, 8 + hl / 2, 8 + hl, 8 + hl + 1, n / 2 + hl / 2, n - 1};
        for (i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
            write_bytes(q, good, cuts[i]);
            r = trn_checkpoint_load(q, &b, &ob, NULL);
            CHECK(r == TRN_ERR_FORMAT && reason_has(q), "truncated to %zu of %zu -> FORMAT: %s %s", cuts[i], n,
                  trn_result_string(r), trn_error_reason());
        }
        write_bytes(q, good, n - 1);
        trn_checkpoint_load(q, &b, &ob, NULL);
        CHECK(reason_has("truncated"), "reason says truncated: %s", trn_error_reason());
    }
    /* a flipped bit in the data: CHECKSUM */
    bad = (unsigned char *)malloc(n);
    memcpy(bad, good, n);
    bad[n - 3] ^= 0x10;
    write_bytes(q, bad, n);
    r = trn_checkpoint_load(q, &b, &ob, NULL);
    CHECK(r == TRN_ERR_CHECKSUM && reason_has(q) && reason_has("checksum"), "data bit flip -> CHECKSUM: %s",
          trn_error_reason());
    CHECK(trn_checkpoint_verify(q) == TRN_ERR_CHECKSUM, "verify sees it too");
    /* a flipped digit in a metadata value (the header is checksummed too) */
    memcpy(bad, good, n);
    {
        unsigned char *s = (unsigned char *)strstr((char *)bad + 8, "987654321");
        CHECK(s != NULL, "rng value in header");
        if (s) s[3] ^= 0x01; /* '7' -> '6' */
    }
    write_bytes(q, bad, n);
    CHECK(trn_checkpoint_load(q, &b, &ob, NULL) == TRN_ERR_CHECKSUM, "metadata digit flip -> CHECKSUM: %s",
          trn_error_reason());

    /* every single-bit flip in the header is refused, never loaded; in the
       data (all CHECKSUM) one bit per byte is enough */
    for (i = 0; i < n; i++) {
        for (bit = 0; bit < 8; bit++) {
            if (i >= 8 + hl + 64 && i < n - 64 && bit != (int)(i % 8)) continue;
            tried++;
            memcpy(bad, good, n);
            bad[i] ^= (unsigned char)(1u << bit);
            write_bytes(q, bad, n);
            r = trn_checkpoint_load(q, &b, &ob, NULL);
            if (r == TRN_OK) {
                if (accepted++ < 5) printf("  bit %d of byte %zu (of %zu) flipped: accepted!\n", bit, i, n);
            } else {
                counts[-r]++;
            }
        }
    }
    CHECK(accepted == 0, "all %d single-bit flips refused (%d accepted)", tried, accepted);
    printf("  %d bit flips: FORMAT %d, CHECKSUM %d, MISMATCH %d, IO %d\n", tried, counts[-TRN_ERR_FORMAT],
           counts[-TRN_ERR_CHECKSUM], counts[-TRN_ERR_MISMATCH], counts[-TRN_ERR_IO]);

    /* wrong shape, wrong model, missing tensor, extra tensor: MISMATCH */
    {
        trn_model c;
        trn_adamw oc;
        int v;
        const char *what[] = {"", "shape", "renamed", "missing"};
        for (v = 1; v <= 3; v++) {
            make_model(&c, v, 20, 1);
            trn_adamw_init(&oc, NULL);
            r = trn_checkpoint_load(p, &c, &oc, NULL);
            CHECK(r == TRN_ERR_MISMATCH && reason_has(p), "%s -> MISMATCH: %s %s", what[v], trn_result_string(r),
                  trn_error_reason());
            if (v == 1)
                CHECK(reason_has("h.0.b") && reason_has("(16)") && reason_has("(15)"), "names tensor and both shapes: %s",
                      trn_error_reason());
            r = trn_safetensors_save(q, &c, NULL);
            r = trn_safetensors_load(q, &b, NULL);
            CHECK(r == TRN_ERR_MISMATCH && reason_has(q), "weights of a %s model -> MISMATCH: %s", what[v],
                  trn_error_reason());
            trn_adamw_free(&oc);
            trn_model_free(&c);
        }
    }
    /* the model is untouched when the header already shows the mismatch */
    {
        trn_model c;
        float *before;
        make_model(&c, 1, 20, 1);
        before = (float *)malloc(c.n_floats * 4);
        memcpy(before, c.param_data, c.n_floats * 4);
        trn_checkpoint_load(p, &c, NULL, NULL);
        CHECK(same_bits(before, c.param_data, c.n_floats * 4), "model untouched by a mismatching file");
        free(before);
        trn_model_free(&c);
    }
    free(bad);
    free(good);
    trn_adamw_free(&oa); trn_adamw_free(&ob);
    trn_model_free(&a); trn_model_free(&b);
}

/* ---------------------------------------------------------------------- */
static uint16_t f16_data[] = {0x3C00, 0xC000, 0x7BFF, 0x0001, 0x7C00, 0x3555, 0x8000, 0x03FF};
static const float f16_want[] = {1.0f, -2.0f, 65504.0f, 5.9604644775390625e-08f, INFINITY, 0.333251953125f, -0.0f,
                                 6.09755516052246094e-05f};
static uint16_t bf16_data[] = {0x3F80, 0xC060, 0x4049};
static const float bf16_want[] = {1.0f, -3.5f, 3.140625f};

static void test_foreign(void) {
    trn_safetensors f;
    const trn_st_tensor *t;
    float out[16];
    unsigned char data[64];
    const char *q = tpath("foreign.safetensors");
    const char *hdr =
        "{ \"__metadata__\" : null ,\n\t\"half\" : {\"shape\": [2, 4], \"extra\": {\"x\": [1, -2.5e+3, true, false, null, "
        "\"s\\u00e9\", {}]}, \"dtype\": \"F16\", \"data_offsets\": [0, 16]},"
        "\"b\\u00e9\\ud83d\\ude00\\n\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[16,22]},"
        "\"ids\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[22,30]},"
        "\"scalar\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[30,34]},"
        "\"empty\":{\"dtype\":\"F32\",\"shape\":[0,3],\"data_offsets\":[34,34]}}   ";
    float sc = 7.25f;
    int64_t id = 123;
    size_t i;
    memset(data, 0, sizeof data);
    memcpy(data, f16_data, 16);
    memcpy(data + 16, bf16_data, 6);
    memcpy(data + 22, &id, 8);
    memcpy(data + 30, &sc, 4);
    craft(q, hdr, data, 34);
    CHECK(trn_safetensors_open(&f, q) == TRN_OK, "foreign open: %s", trn_error_reason());
    CHECK(f.n_tensors == 5 && f.n_meta == 0 && !f.has_crc, "5 tensors, no metadata, no crc");
    t = trn_safetensors_find(&f, "half");
    CHECK(t && trn_safetensors_read(&f, t, out) == TRN_OK, "read F16");
    for (i = 0; t && i < 8; i++) CHECK(same_bits(&out[i], &f16_want[i], 4), "f16[%zu] = %g want %g", i, out[i], f16_want[i]);
    t = trn_safetensors_find(&f, "b\xc3\xa9\xf0\x9f\x98\x80\n");
    CHECK(t != NULL, "escaped UTF-8 name decoded");
    CHECK(t && trn_safetensors_read(&f, t, out) == TRN_OK && same_bits(out, bf16_want, 12), "read BF16");
    t = trn_safetensors_find(&f, "ids");
    CHECK(t && trn_safetensors_read(&f, t, out) == TRN_ERR_FORMAT, "I64 as floats -> FORMAT");
    t = trn_safetensors_find(&f, "scalar");
    CHECK(t && t->ndim == 0 && t->numel == 1 && trn_safetensors_read(&f, t, out) == TRN_OK && out[0] == 7.25f, "scalar");
    t = trn_safetensors_find(&f, "empty");
    CHECK(t && t->numel == 0 && trn_safetensors_read(&f, t, out) == TRN_OK, "empty tensor");
    CHECK(trn_safetensors_verify(&f) == TRN_OK, "no crc: verify is OK");
    trn_safetensors_close(&f);
    trn_safetensors_close(&f); /* twice is fine */

    /* all 65536 halves: exact widening (checked against the bit rules) */
    {
        static uint16_t all[65536];
        static float w[65536];
        int bad = 0;
        char h[128];
        for (i = 0; i < 65536; i++) all[i] = (uint16_t)i;
        snprintf(h, sizeof h, "{\"all\":{\"dtype\":\"F16\",\"shape\":[65536],\"data_offsets\":[0,131072]}}");
        craft(q, h, all, sizeof all);
        trn_safetensors_open(&f, q);
        t = trn_safetensors_find(&f, "all");
        CHECK(t && trn_safetensors_read(&f, t, w) == TRN_OK, "read all halves");
        for (i = 0; t && i < 65536; i++) {
            int e = (int)((i >> 10) & 31), mnt = (int)(i & 1023);
            double v = e == 0 ? ldexp(mnt, -24) : e == 31 ? (mnt ? NAN : INFINITY) : ldexp(1024 + mnt, e - 25);
            if (i & 0x8000) v = -v;
            if (isnan(v) ? !isnan(w[i]) : (w[i] != (float)v || !signbit(w[i]) != !signbit(v))) bad++;
        }
        CHECK(bad == 0, "all 65536 F16 values widen exactly (%d wrong)", bad);
        trn_safetensors_close(&f);
    }
}

/* headers the parser must refuse (TRN_ERR_FORMAT), with their data size */
static const struct { const char *hdr; size_t data; } bad_headers[] = {
    {"{", 0},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}", 4},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},}", 4},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],}}", 4},
    {"{\"a\":{\"dtype\":\"F33\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[01],\"data_offsets\":[0,4]}}", 4},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1.0],\"data_offsets\":[0,4]}}", 4},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1e0],\"data_offsets\":[0,4]}}", 4},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,8]}}", 4},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 8},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]}}", 4},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[2,6]}}", 6},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}", 12},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8},
    {"{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4},
    {"{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4},
    {"{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", 4},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 4},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":1,\"data_offsets\":[0,4]}}", 4},
    {"{\"a\":{\"dtype\":32,\"shape\":[1],\"data_offsets\":[0,4]}}", 4},
    {"{\"a\":\"F32\"}", 0},
    {"{\"a\":[]}", 0},
    {"{\"__metadata__\":{\"k\":1}}", 0},
    {"{\"__metadata__\":{\"k\":\"v\",\"k\":\"w\"}}", 0},
    {"{\"__metadata__\":{},\"__metadata__\":{}}", 0},
    {"{\"__metadata__\":[]}", 0},
    {"{\"__metadata__\":{\"trn.version\":\"1\"}}", 0},
    {"{\"__metadata__\":{\"trn.crc32c\":\"0000000A\"}}", 0},
    {"{\"__metadata__\":{\"trn.crc32c\":\"123\"}}", 0},
    {"{\"__metadata__\":{\"trn.crc32c\":\"\\u0030\\u0030\\u0030\\u0030\\u0030\\u0030\\u0030\\u0030\"}}", 0},
    {"{\"a\x01\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4},
    {"{\"a\xff\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4},
    {"{\"a\xc0\xaf\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4},
    {"{\"a\xed\xa0\x80\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4},
    {"{\"a\xe2\x82\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4},
    {"{\"\\ud800\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4},
    {"{\"\\udc00\\ud800\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4},
    {"{\"\\x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4},
    {"{\"\\u00g0\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4},
    {"{\"\\u0000\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,99999999999999999999999]}}", 4},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4294967296],\"data_offsets\":[0,0]}}", 0},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904,4],\"data_offsets\":[0,0]}}", 0},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4},
    {"[1]", 0},
    {" {}", 0},
    {"{} x", 0},
    {"{}\x01", 0},
    {"{}", 4},
    {"{\"a\":{\"x\":tru,\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4},
    {"{\"a\":{\"x\":1e,\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4},
    {"{\"a\":{\"x\":-,\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4},
    {"{\"a\":{\"x\":.5,\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4},
    {"{\"a\":{\"x\":[1 2],\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4},
    {"{\"a\":{\"x\":{1:2},\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4},
    {"{\"a\":{\"x\":\"\\", 0},
    {"{\"a\" \"b\"}", 0},
    {"{\"a\":", 0},
    {"{\"a\"", 0},
};

static void test_bad_headers(void) {
    const char *q = tpath("h.safetensors");
    unsigned char zeros[16] = {0};
    trn_safetensors f;
    size_t i;
    int ok_all = 1;
    for (i = 0; i < sizeof bad_headers / sizeof bad_headers[0]; i++) {
        trn_result r;
        craft(q, bad_headers[i].hdr, zeros, bad_headers[i].data);
        r = trn_safetensors_open(&f, q);
        if (r != TRN_ERR_FORMAT || !reason_has(q)) {
            ok_all = 0;
            CHECK(0, "bad header %zu '%s' -> %s (%s)", i, bad_headers[i].hdr, trn_result_string(r), trn_error_reason());
            if (r == TRN_OK) trn_safetensors_close(&f);
        }
    }
    CHECK(ok_all, "%zu malformed headers all refused with FORMAT", sizeof bad_headers / sizeof bad_headers[0]);
    { /* nesting bomb inside a skipped field: refused, no stack overflow */
        size_t depth = 100000, k = 0;
        char *h = (char *)malloc(2 * depth + 100);
        k += (size_t)sprintf(h, "{\"a\":{\"x\":");
        for (i = 0; i < depth; i++) h[k++] = '[';
        for (i = 0; i < depth; i++) h[k++] = ']';
        strcpy(h + k, "}}");
        craft(q, h, zeros, 0);
        CHECK(trn_safetensors_open(&f, q) == TRN_ERR_FORMAT && reason_has("deeply"), "nesting bomb -> FORMAT: %s",
              trn_error_reason());
        free(h);
    }
    { /* a header length larger than the file, and one over 100 MB */
        unsigned char b[16] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, '{', '}'};
        write_bytes(q, b, 10);
        CHECK(trn_safetensors_open(&f, q) == TRN_ERR_FORMAT, "huge header length -> FORMAT");
        memset(b, 0, 8);
        b[0] = 1;
        write_bytes(q, b, 10);
        CHECK(trn_safetensors_open(&f, q) == TRN_ERR_FORMAT, "header length 1 -> FORMAT");
    }
    { /* the smallest valid files */
        craft(q, "{}", zeros, 0);
        CHECK(trn_safetensors_open(&f, q) == TRN_OK && f.n_tensors == 0, "{} is a valid empty file: %s", trn_error_reason());
        trn_safetensors_close(&f);
        craft(q, "{\"__metadata__\":{\"a\":\"1\",\"B\":\"2\"}}  ", zeros, 0);
        CHECK(trn_safetensors_open(&f, q) == TRN_OK && f.n_meta == 2 && strcmp(trn_safetensors_meta(&f, "a"), "1") == 0,
              "metadata only");
        trn_safetensors_close(&f);
    }
}

/* ---------------------------------------------------------------------- */
static int count_files(const char *dir, const char *needle) {
    char cmd[600];
    FILE *p;
    int n = 0;
    snprintf(cmd, sizeof cmd, "ls -1 '%s' | grep -c -- '%s'", dir, needle);
    p = popen(cmd, "r");
    if (p) { if (fscanf(p, "%d", &n) != 1) n = -1; pclose(p); }
    return n;
}

static void test_run_dir(void) {
    trn_model a, b;
    trn_adamw oa, ob;
    char dir[512], path[1100], stale[1100];
    long long step = -1, s;
    trn_result r;
    snprintf(dir, sizeof dir, "%s/run/nested", tmpdir);
    make_model(&a, 0, 50, 1);
    trn_adamw_init(&oa, NULL);
    make_model(&b, 0, 50, 2);
    trn_adamw_init(&ob, NULL);

    CHECK(trn_checkpoint_latest(dir, path, sizeof path, &step) == TRN_ERR_IO, "no dir -> IO");
    /* a future checkpoint left by an earlier run, and a stale temp file */
    fake_train(&a, &oa, 1, 1);
    CHECK(trn_checkpoint_save_dir(dir, 1000, 3, &a, &oa, NULL, path, sizeof path) == TRN_OK, "save 1000: %s",
          trn_error_reason());
    snprintf(stale, sizeof stale, "%s/ckpt_00000005.safetensors.tmp.2147483000", dir);
    write_bytes(stale, "partial", 7);
    /* issue 24 item 15: the final model.safetensors's temp file of a run
       killed while writing it (a dead pid) goes too */
    snprintf(stale, sizeof stale, "%s/model.safetensors.tmp.2147483001", dir);
    write_bytes(stale, "partial", 7);
    for (s = 10; s <= 70; s += 10) {
        fake_train(&a, &oa, 1, (uint64_t)s);
        r = trn_checkpoint_save_dir(dir, s, 3, &a, &oa, NULL, path, sizeof path);
        CHECK(r == TRN_OK, "save_dir step %lld: %s", s, trn_error_reason());
    }
    CHECK(strstr(path, "ckpt_00000070.safetensors") != NULL, "path_out %s", path);
    CHECK(count_files(dir, "^ckpt_0000005") == 1 && count_files(dir, "^ckpt_0000006") == 1 &&
          count_files(dir, "^ckpt_0000007") == 1 && count_files(dir, "^ckpt_0000001.0") == 0 &&
          count_files(dir, "^ckpt_00000040") == 0, "keep 3: only 50, 60, 70 of the new run remain");
    CHECK(count_files(dir, "^ckpt_00001000") == 1, "the earlier run's step 1000 is not deleted");
    CHECK(count_files(dir, "tmp") == 0, "stale temp file of a dead process removed");

    CHECK(trn_checkpoint_latest(dir, path, sizeof path, &step) == TRN_OK && step == 1000, "latest is 1000");
    /* corrupt 1000 (bit flip), truncate 70, empty 80: latest skips them to 60 */
    {
        size_t n;
        unsigned char *buf;
        snprintf(path, sizeof path, "%s/ckpt_00001000.safetensors", dir);
        buf = read_bytes(path, &n);
        buf[n - 5] ^= 1;
        write_bytes(path, buf, n);
        free(buf);
        snprintf(path, sizeof path, "%s/ckpt_00000070.safetensors", dir);
        buf = read_bytes(path, &n);
        write_bytes(path, buf, n - 100);
        free(buf);
        snprintf(path, sizeof path, "%s/ckpt_00000080.safetensors", dir);
        write_bytes(path, "", 0);
    }
    printf("  (three 'skipping' lines on stderr are expected here)\n");
    fflush(stdout);
    r = trn_checkpoint_latest(dir, path, sizeof path, &step);
    CHECK(r == TRN_OK && step == 60 && strstr(path, "ckpt_00000060.safetensors"), "latest valid is 60 (got %lld)", step);
    CHECK(trn_checkpoint_load(path, &b, &ob, NULL) == TRN_OK, "resume from it: %s", trn_error_reason());
    /* keep = 1 after a resume: the newer broken ones are left alone, 50 goes */
    r = trn_checkpoint_save_dir(dir, 65, 1, &b, &ob, NULL, path, sizeof path);
    CHECK(r == TRN_OK && count_files(dir, "^ckpt_0000005") == 0 && count_files(dir, "^ckpt_00000060") == 0 &&
          count_files(dir, "^ckpt_00000065") == 1 && count_files(dir, "^ckpt_00000070") == 1,
          "keep 1 deletes older only");
    /* everything broken: an error that is not IO, naming the newest problem */
    {
        char cmd[1200];
        snprintf(cmd, sizeof cmd, "for f in '%s'/ckpt_*.safetensors; do printf x > \"$f\"; done", dir);
        CHECK(system(cmd) == 0, "break all");
    }
    r = trn_checkpoint_latest(dir, path, sizeof path, &step);
    CHECK(r == TRN_ERR_FORMAT && reason_has("no valid checkpoint"), "all broken -> FORMAT: %s", trn_error_reason());
    snprintf(dir, sizeof dir, "%s/emptydir", tmpdir);
    mkdir(dir, 0755);
    CHECK(trn_checkpoint_latest(dir, path, sizeof path, &step) == TRN_ERR_IO, "empty dir -> IO");
    trn_adamw_free(&oa); trn_adamw_free(&ob);
    trn_model_free(&a); trn_model_free(&b);
}

/* a failed write leaves the good file as it was and no temp file */
static void test_failed_write(void) {
    trn_model a, b;
    const char *p = tpath("keep.safetensors");
    struct rlimit old, lim;
    size_t n0, n1;
    unsigned char *before, *after;
    trn_result r;
    make_model(&a, 0, 100000, 1);
    CHECK(trn_safetensors_save(p, &a, NULL) == TRN_OK, "good save");
    before = read_bytes(p, &n0);
    make_model(&b, 0, 100000, 2);
    /* file size limit below the file: write() fails with EFBIG */
    signal(SIGXFSZ, SIG_IGN);
    getrlimit(RLIMIT_FSIZE, &old);
    lim = old;
    lim.rlim_cur = 100000;
    setrlimit(RLIMIT_FSIZE, &lim);
    r = trn_safetensors_save(p, &b, NULL);
    setrlimit(RLIMIT_FSIZE, &old);
    CHECK(r == TRN_ERR_IO, "write past the size limit -> IO: %s", trn_error_reason());
    after = read_bytes(p, &n1);
    CHECK(n0 == n1 && memcmp(before, after, n0) == 0, "the previous file is intact");
    CHECK(count_files(tmpdir, "keep.safetensors.tmp") == 0, "no temp file left");
    CHECK(trn_safetensors_load(p, &b, NULL) == TRN_OK && same_bits(a.param_data, b.param_data, a.n_floats * 4),
          "and it still loads");
    CHECK(trn_safetensors_save("/nonexistent-dir/x.safetensors", &a, NULL) == TRN_ERR_IO &&
          reason_has("/nonexistent-dir/x.safetensors"), "unwritable path -> IO naming it: %s", trn_error_reason());
    free(before); free(after);
    trn_model_free(&a); trn_model_free(&b);
}

/* saving 48 MB of state goes through a staging buffer of at most 4 MiB */
static void test_ledger(void) {
    trn_model a;
    trn_adamw o;
    size_t peak, model_bytes;
    make_model(&a, 0, 4 << 20, 3);
    model_bytes = a.n_floats * 4;
    trn_adamw_init(&o, NULL);
    fake_train(&a, &o, 1, 3);
    trn_ledger_reset_peak();
    CHECK(trn_checkpoint_save(tpath("big.safetensors"), &a, &o, NULL) == TRN_OK, "big save: %s", trn_error_reason());
    peak = trn_ledger_peak(TRN_HOST, TRN_KIND_TEMP);
    printf("  save of %.1f MB (weights + m + v): peak TEMP %.2f MB\n", 3.0 * model_bytes / 1e6, peak / 1e6);
    CHECK(peak <= ((size_t)4 << 20) + (1 << 16) && peak < model_bytes / 2, "save: no model-sized temporary (%zu bytes)", peak);
    trn_ledger_reset_peak();
    CHECK(trn_checkpoint_load(tpath("big.safetensors"), &a, &o, NULL) == TRN_OK, "big load: %s", trn_error_reason());
    peak = trn_ledger_peak(TRN_HOST, TRN_KIND_TEMP);
    printf("  load: peak TEMP %.2f MB\n", peak / 1e6);
    CHECK(peak <= ((size_t)4 << 20) + (1 << 16), "load: staging only (%zu bytes)", peak);
    CHECK(trn_ledger_current(TRN_HOST, TRN_KIND_TEMP) == 0, "no TEMP left allocated");
    unlink(tpath("big.safetensors"));
    trn_adamw_free(&o);
    trn_model_free(&a);
}

/* ---------------------------------------------------------------------- */
/* --write-py: known values for Python to check */
static int write_py(const char *path) {
    trn_model m;
    static trn_meta meta;
    trn_tensor *a, *b, *big;
    float bv[4] = {-0.0f, 1.40129846e-45f, 3.40282347e38f, -1e-3f};
    float *host;
    int i;
    trn_model_init(&m, NULL);
    a = trn_param2(&m, "a", 2, 3);
    b = trn_param1(&m, "b.weight", 4);
    big = trn_param1(&m, "big", 300000);
    trn_model_alloc(&m);
    host = (float *)malloc(300000 * sizeof(float));
    for (i = 0; i < 6; i++) host[i] = (float)i * 0.5f - 1.0f;
    trn_write(&m, a, host);
    trn_write(&m, b, bv);
    for (i = 0; i < 300000; i++) host[i] = (float)i * 0.25f - 7.0f;
    trn_write(&m, big, host);
    free(host);
    trn_meta_set(&meta, "config", "{\"n_layer\": 2, \"name\": \"tiny\"}");
    trn_meta_set(&meta, "unicode", "h\xc3\xa9llo \xe2\x9c\x93");
    trn_meta_set(&meta, "quote", "a\"b\\c\nd");
    trn__st_staging = 65536; /* several chunks for "big" */
    if (trn_safetensors_save(path, &m, &meta) != TRN_OK) {
        fprintf(stderr, "test_checkpoint: %s\n", trn_error_reason());
        return 2;
    }
    trn_model_free(&m);
    printf("wrote %s\n", path);
    return 0;
}

/* --read-py: the file tests/test_safetensors_py.sh wrote with numpy */
static int read_py(const char *path) {
    trn_safetensors f;
    const trn_st_tensor *t, *t2;
    static float w[65536], ref[65536];
    int i, bad = 0;
    if (trn_safetensors_open(&f, path) != TRN_OK) {
        printf("FAIL open: %s\n", trn_error_reason());
        return 1;
    }
    t = trn_safetensors_find(&f, "f32");
    CHECK(t && t->ndim == 2 && t->shape[0] == 3 && t->shape[1] == 4, "f32 (3,4)");
    if (t && trn_safetensors_read(&f, t, w) == TRN_OK)
        for (i = 0; i < 12; i++) CHECK(w[i] == (float)i * 0.5f - 2.0f, "f32[%d] = %g", i, w[i]);
    t = trn_safetensors_find(&f, "f16_all");
    t2 = trn_safetensors_find(&f, "f16_as_f32");
    CHECK(t && t2 && trn_safetensors_read(&f, t, w) == TRN_OK && trn_safetensors_read(&f, t2, ref) == TRN_OK,
          "read f16_all and numpy's float32 of it");
    for (i = 0; t && t2 && i < 65536; i++)
        if (isnan(ref[i]) ? !isnan(w[i]) : !same_bits(&w[i], &ref[i], 4)) bad++;
    CHECK(bad == 0, "all 65536 F16 values widen as numpy does (%d differ)", bad);
    t = trn_safetensors_find(&f, "scalar");
    CHECK(t && t->ndim == 0 && trn_safetensors_read(&f, t, w) == TRN_OK && w[0] == 7.25f, "scalar 7.25");
    t = trn_safetensors_find(&f, "empty");
    CHECK(t && t->ndim == 2 && t->numel == 0 && t->shape[1] == 4, "empty (0,4)");
    t = trn_safetensors_find(&f, "i64");
    CHECK(t && strcmp(t->dtype, "I64") == 0 && t->numel == 3, "i64 present");
    CHECK(trn_safetensors_meta(&f, "hello") && strcmp(trn_safetensors_meta(&f, "hello"), "world") == 0, "meta hello");
    CHECK(trn_safetensors_meta(&f, "\xc3\xbc") && strcmp(trn_safetensors_meta(&f, "\xc3\xbc"), "\xe2\x9c\x93") == 0,
          "meta unicode key and value");
    trn_safetensors_close(&f);
    return check_summary();
}

int main(int argc, char **argv) {
    char cmd[300];
    if (argc == 3 && strcmp(argv[1], "--write-py") == 0) return write_py(argv[2]);
    if (argc == 3 && strcmp(argv[1], "--read-py") == 0) return read_py(argv[2]);
    if (argc > 1) {
        fprintf(stderr, "usage: test_checkpoint [--write-py FILE | --read-py FILE]\n");
        return 2;
    }
    snprintf(tmpdir, sizeof tmpdir, "/tmp/trn_test_ckpt_XXXXXX");
    if (!mkdtemp(tmpdir)) { perror("mkdtemp"); return 2; }
    test_crc();
    test_meta();
    test_weights_roundtrip();
    test_checkpoint_roundtrip();
    test_corruption();
    test_foreign();
    test_bad_headers();
    test_run_dir();
    test_failed_write();
    test_ledger();
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) printf("could not remove %s\n", tmpdir);
    return check_summary();
}
