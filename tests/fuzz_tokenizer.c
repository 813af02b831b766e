/* tests/fuzz_tokenizer.c - fuzz target for the tokenizer files the kit
   reads: GPT-2's byte-level BPE in Hugging Face's layout, vocab.json +
   merges.txt (extras/train_data.h, trn_tokenizer_load_bpe), then encoding
   and decoding with the tokenizer that loaded.

   One input = the two files and a text, split at the first two NUL bytes:
       vocab.json NUL merges.txt NUL text
   (a missing part is an empty file / no text). The two files are written
   to a private temporary directory (in /dev/shm when there is one) and
   loaded by path, as `tools/make_shard --tokenizer DIR` and the examples
   load them. A refused pair must leave the tokenizer empty and every
   byte it took freed. A loaded tokenizer must hold its promises
   (abort = a finding):
   - every byte has its single-byte token; eot_id is -1 or the id of
     "<|endoftext|>"; each id with a token is found again by its bytes;
   - encoding the input's text (at most 512 bytes) and a fixed text gives
     ids in [0, vocab_size) that all have a token, and decoding them gives
     back the text byte for byte (a byte-level BPE promises that for any
     bytes, UTF-8 or not), also through a short buffer (snprintf's rule).
   The first part is also loaded as a Hugging Face tokenizer.json
   (trn_tokenizer_load_hf; seeds 7 and 8 are small ones, byte-level with
   Llama 3's split and added tokens, and metaspace with byte fallback): a
   refused file leaves the tokenizer empty and every byte freed; a loaded
   one encodes both texts to ids in [0, vocab_size) that each decode to
   something, with and without special tokens and the BOS, and decodes
   them through a short buffer as through a long one.
   Nothing may crash, leak or exit.

   Built two ways, as tests/fuzz_safetensors.c:
   - by tests/test_fuzz.sh with clang -fsanitize=fuzzer,address,undefined
     -DTRN_LIBFUZZER;
   - by build.sh as a plain program: --write-seeds DIR, FILE... (replay),
     --mutate N (its own small mutation loop, without libFuzzer).
*/
#define TRAIN_IMPLEMENTATION
#include "train.h"
#include "extras/train_data.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#define FZ_ASSERT(c) do { if (!(c)) { fprintf(stderr, "fuzz invariant failed: %s\n", #c); abort(); } } while (0)

static char fz_dir[64], fz_vocab[128], fz_merges[128], fz_hfpath[128];

static void fz_cleanup(void) {
    remove(fz_hfpath);
    remove(fz_vocab);
    remove(fz_merges);
    rmdir(fz_dir);
}

static void fz_setup(void) {
    if (fz_dir[0]) return;
    strcpy(fz_dir, access("/dev/shm", W_OK) == 0 ? "/dev/shm/trn_fuzz_tok_XXXXXX" : "/tmp/trn_fuzz_tok_XXXXXX");
    if (!mkdtemp(fz_dir)) { perror("fuzz_tokenizer: mkdtemp"); abort(); }
    snprintf(fz_vocab, sizeof fz_vocab, "%s/vocab.json", fz_dir);
    snprintf(fz_merges, sizeof fz_merges, "%s/merges.txt", fz_dir);
    snprintf(fz_hfpath, sizeof fz_hfpath, "%s/tokenizer.json", fz_dir);
    atexit(fz_cleanup);
}

static void fz_write(const char *path, const uint8_t *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(p, 1, n, f) != n) || fclose(f) != 0) { perror(path); abort(); }
}

/* encode s, check the ids, decode, compare; a short buffer too */
static void fz_roundtrip(const trn_tokenizer *tok, const char *s, size_t n) {
    trn_tokens ids = {0};
    char *back = (char *)malloc(n + 1), small[8];
    size_t i, got;
    FZ_ASSERT(back != NULL);
    FZ_ASSERT(trn_tokenizer_encode(tok, s, n, &ids) == TRN_OK);
    FZ_ASSERT(ids.n <= n);
    for (i = 0; i < ids.n; i++) {
        size_t len;
        FZ_ASSERT(ids.ids[i] >= 0 && ids.ids[i] < tok->vocab_size);
        FZ_ASSERT(trn_tokenizer_token(tok, ids.ids[i], &len) != NULL && len >= 1);
    }
    got = trn_tokenizer_decode(tok, ids.ids, ids.n, back, n + 1);
    FZ_ASSERT(got == n && memcmp(back, s, n) == 0 && back[n] == 0);
    got = trn_tokenizer_decode(tok, ids.ids, ids.n, small, sizeof small);
    FZ_ASSERT(got == n && small[n < sizeof small ? n : sizeof small - 1] == 0);
    FZ_ASSERT(memcmp(small, s, n < sizeof small ? n : sizeof small - 1) == 0);
    trn_tokens_free(&ids);
    free(back);
}

/* tokenizer.json: encode s (flags), check the ids, decode long and short */
static void fz_hf_encode(const trn_tokenizer *tok, const char *s, size_t n, int flags) {
    trn_tokens ids = {0};
    char small[8], *big;
    size_t i, full, got;
    FZ_ASSERT(trn_tokenizer_encode_ex(tok, s, n, flags, &ids) == TRN_OK);
    for (i = 0; i < ids.n; i++) FZ_ASSERT(ids.ids[i] >= 0 && ids.ids[i] < tok->vocab_size);
    full = trn_tokenizer_decode(tok, ids.ids, ids.n, NULL, 0);
    big = (char *)malloc(full + 1);
    FZ_ASSERT(big != NULL);
    FZ_ASSERT(trn_tokenizer_decode(tok, ids.ids, ids.n, big, full + 1) == full && big[full] == 0);
    got = trn_tokenizer_decode(tok, ids.ids, ids.n, small, sizeof small);
    FZ_ASSERT(got == full && memcmp(small, big, full < sizeof small ? full : sizeof small - 1) == 0);
    free(big);
    trn_tokens_free(&ids);
}

static void fz_hf(const uint8_t *p, size_t n, const char *fixed, size_t n_fixed, const uint8_t *text, size_t n_text) {
    size_t runtime0 = trn_ledger_current(TRN_HOST, TRN_KIND_RUNTIME);
    trn_tokenizer tok;
    int f;
    fz_write(fz_hfpath, p, n);
    if (trn_tokenizer_load_hf(&tok, fz_hfpath) != TRN_OK) {
        FZ_ASSERT(tok.bytes == NULL && tok.lookup == NULL && tok.merges == NULL && tok.added == NULL && tok.dec == NULL);
        FZ_ASSERT(trn_ledger_current(TRN_HOST, TRN_KIND_RUNTIME) == runtime0);
        trn_tokenizer_free(&tok);
        return;
    }
    FZ_ASSERT(tok.kind == TRN_TOKENIZER_HF && tok.vocab_size >= 1 && tok.vocab_size <= (1 << 24));
    for (f = 0; f < 4; f++) {
        fz_hf_encode(&tok, fixed, n_fixed, f);
        if (text) fz_hf_encode(&tok, (const char *)text, n_text < 512 ? n_text : 512, f);
    }
    trn_tokenizer_free(&tok);
    FZ_ASSERT(trn_ledger_current(TRN_HOST, TRN_KIND_RUNTIME) == runtime0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const char fixed[] = "Hello world, it's 12 o'clock\n\n  the  \xC3\xA9t\xC3\xA9 \xF0\x9F\x98\x80 "
                                "<|endoftext|> \xFF\xC3 tab\there";
    const uint8_t *sep1 = (const uint8_t *)memchr(data, 0, size), *sep2, *text = NULL;
    size_t n_vocab = sep1 ? (size_t)(sep1 - data) : size, n_merges = 0, n_text = 0, runtime0;
    trn_tokenizer tok;
    int b, id;
    fz_setup();
    if (sep1) {
        const uint8_t *m = sep1 + 1;
        size_t left = size - n_vocab - 1;
        sep2 = (const uint8_t *)memchr(m, 0, left);
        n_merges = sep2 ? (size_t)(sep2 - m) : left;
        if (sep2) { text = sep2 + 1; n_text = size - (size_t)(text - data); }
    }
    fz_write(fz_vocab, data, n_vocab);
    fz_write(fz_merges, sep1 ? sep1 + 1 : data, n_merges);
    runtime0 = trn_ledger_current(TRN_HOST, TRN_KIND_RUNTIME);
    if (trn_tokenizer_load_bpe(&tok, fz_vocab, fz_merges) != TRN_OK) {
        /* refused: left empty, nothing kept */
        FZ_ASSERT(tok.bytes == NULL && tok.off == NULL && tok.len == NULL && tok.lookup == NULL && tok.merges == NULL);
        FZ_ASSERT(trn_ledger_current(TRN_HOST, TRN_KIND_RUNTIME) == runtime0);
        trn_tokenizer_free(&tok);
    } else {
        FZ_ASSERT(tok.kind == TRN_TOKENIZER_BPE && tok.vocab_size >= 1 && tok.vocab_size <= (1 << 24));
        FZ_ASSERT(tok.n_merges >= 0);
        for (b = 0; b < 256; b++) {
            size_t len;
            const char *s = trn_tokenizer_token(&tok, tok.byte_id[b], &len);
            FZ_ASSERT(s != NULL && len == 1 && (unsigned char)s[0] == b);
        }
        if (tok.eot_id >= 0) {
            size_t len;
            const char *s = trn_tokenizer_token(&tok, tok.eot_id, &len);
            FZ_ASSERT(s != NULL && len == 13 && memcmp(s, "<|endoftext|>", 13) == 0);
        } else {
            FZ_ASSERT(tok.eot_id == -1 && trn_tokenizer_find(&tok, "<|endoftext|>", 13) == -1);
        }
        for (id = 0; id < tok.vocab_size && id < 1024; id++) {
            size_t len;
            const char *s = trn_tokenizer_token(&tok, id, &len);
            if (s) FZ_ASSERT(trn_tokenizer_find(&tok, s, len) == id);
        }
        FZ_ASSERT(trn_tokenizer_token(&tok, -1, NULL) == NULL && trn_tokenizer_token(&tok, tok.vocab_size, NULL) == NULL);
        fz_roundtrip(&tok, fixed, sizeof fixed - 1);
        if (text) fz_roundtrip(&tok, (const char *)text, n_text < 512 ? n_text : 512);
        trn_tokenizer_free(&tok);
        FZ_ASSERT(trn_ledger_current(TRN_HOST, TRN_KIND_RUNTIME) == runtime0);
    }
    fz_hf(data, n_vocab, fixed, sizeof fixed - 1, text, n_text);
    FZ_ASSERT(trn_ledger_current(TRN_HOST, TRN_KIND_TEMP) == 0);
    return 0;
}

#ifndef TRN_LIBFUZZER
/* --- without libFuzzer: seeds, replay, a small mutation loop ----------- */
typedef struct fz_buf { char *p; size_t n, cap; } fz_buf;

static void put(fz_buf *b, const void *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        b->cap = 2 * (b->n + n + 1);
        b->p = (char *)realloc(b->p, b->cap);
        if (!b->p) abort();
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}
static void puts_(fz_buf *b, const char *s) { put(b, s, strlen(s)); }

/* bytes s[0..n) in GPT-2's printable alphabet (UTF-8), JSON-escaped when
   json is set */
static void put_token(fz_buf *b, const char *s, size_t n, int json) {
    static uint32_t cp_of[256];
    static int ready;
    size_t i;
    if (!ready) {
        uint32_t cp;
        for (cp = 0; cp < 256 + 68; cp++) {
            int byte = trn__bpe_byte_of(cp); /* the loader's own map, inverted */
            if (byte >= 0) cp_of[byte] = cp;
        }
        ready = 1;
    }
    for (i = 0; i < n; i++) {
        uint32_t c = cp_of[(unsigned char)s[i]];
        char u[2];
        if (json && (c == '"' || c == '\\')) put(b, "\\", 1);
        if (c < 0x80) { u[0] = (char)c; put(b, u, 1); }
        else { u[0] = (char)(0xC0 | (c >> 6)); u[1] = (char)(0x80 | (c & 0x3F)); put(b, u, 2); }
    }
}

/* a small byte-level vocabulary: 256 bytes (ids shuffled), merged tokens,
   <|endoftext|> and an added token written with a \u escape */
static const char *const k_merges[][2] = {
    {" ", "t"}, {"h", "e"}, {" t", "he"}, {"'", "s"}, {"1", "2"}, {"\n", "\n"}, {"\xC3", "\xA9"}, {" ", " "},
    {"o", "r"}, {" w", "or"}, {" ", "w"}, {"\"", "\\"}};
#define N_MERGES (int)(sizeof k_merges / sizeof k_merges[0])

static void seed_files(fz_buf *v, fz_buf *m, int crlf, int bom) {
    int b, i;
    char s[2] = {0, 0}, num[32];
    if (bom) puts_(v, "\xEF\xBB\xBF");
    puts_(v, "{");
    for (b = 0; b < 256; b++) {
        s[0] = (char)b;
        puts_(v, b ? ", \"" : "\"");
        put_token(v, s, 1, 1);
        snprintf(num, sizeof num, "\": %d", (b * 7 + 3) % 256);
        puts_(v, num);
    }
    for (i = 0; i < N_MERGES; i++) {
        char both[8];
        snprintf(both, sizeof both, "%s%s", k_merges[i][0], k_merges[i][1]);
        puts_(v, ",\n\"");
        put_token(v, both, strlen(both), 1);
        snprintf(num, sizeof num, "\": %d", 256 + i);
        puts_(v, num);
    }
    puts_(v, ", \"<|endoftext|>\": 300, \"x\\ud83d\\ude00\": 301}\n");
    if (bom) puts_(m, "\xEF\xBB\xBF");
    puts_(m, "#version: 0.2\n");
    for (i = 0; i < N_MERGES; i++) {
        put_token(m, k_merges[i][0], strlen(k_merges[i][0]), 0);
        puts_(m, " ");
        put_token(m, k_merges[i][1], strlen(k_merges[i][1]), 0);
        puts_(m, crlf ? "\r\n" : "\n");
    }
}

/* a tokenizer.json: byte-level with Llama 3's split (meta = 0), or a
   metaspace BPE with byte fallback (meta = 1) */
static void seed_hf(fz_buf *o, int meta) {
    fz_buf v = {0}, m = {0};
    const char *re = trn__re_llama3;
    int i;
    puts_(o, "{\"version\": \"1.0\", \"added_tokens\": [{\"id\": 300, \"content\": \"<|endoftext|>\", \"special\": true, "
             "\"normalized\": false}, {\"id\": 301, \"content\": \"TODO\", \"special\": false, \"normalized\": true}],\n");
    if (meta) {
        puts_(o, "\"normalizer\": {\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"Prepend\", \"prepend\": \"\xE2\x96\x81\"}, "
                 "{\"type\": \"Replace\", \"pattern\": {\"String\": \" \"}, \"content\": \"\xE2\x96\x81\"}]},\n"
                 "\"pre_tokenizer\": null, \"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": "
                 "[{\"SpecialToken\": {\"id\": \"<|endoftext|>\", \"type_id\": 0}}, {\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}], "
                 "\"special_tokens\": {\"<|endoftext|>\": {\"id\": \"<|endoftext|>\", \"ids\": [300], \"tokens\": [\"<|endoftext|>\"]}}},\n"
                 "\"decoder\": {\"type\": \"Sequence\", \"decoders\": [{\"type\": \"Replace\", \"pattern\": {\"String\": \"\xE2\x96\x81\"}, "
                 "\"content\": \" \"}, {\"type\": \"ByteFallback\"}, {\"type\": \"Fuse\"}, {\"type\": \"Strip\", \"content\": \" \", "
                 "\"start\": 1, \"stop\": 0}]},\n\"model\": {\"type\": \"BPE\", \"byte_fallback\": true, \"unk_token\": \"<unk>\", "
                 "\"vocab\": {\"<unk>\": 0");
        for (i = 0; i < 256; i++) {
            char t[48];
            snprintf(t, sizeof t, ", \"<0x%02X>\": %d", i, 1 + i);
            puts_(o, t);
        }
        puts_(o, ", \"\xE2\x96\x81\": 257, \"t\": 258, \"h\": 259, \"e\": 260, \"\xE2\x96\x81t\": 261, \"he\": 262, "
                 "\"\xE2\x96\x81the\": 263, \"\xC3\xA9\": 264}, \"merges\": [\"\xE2\x96\x81 t\", [\"h\", \"e\"], "
                 "\"\xE2\x96\x81t he\"]}}\n");
        return;
    }
    puts_(o, "\"normalizer\": null, \"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", "
             "\"pattern\": {\"Regex\": \"");
    for (i = 0; re[i]; i++) { if (re[i] == '\\' || re[i] == '"') put(o, "\\", 1); put(o, re + i, 1); }
    puts_(o, "\"}, \"behavior\": \"Isolated\", \"invert\": false}, {\"type\": \"ByteLevel\", \"add_prefix_space\": false, "
             "\"use_regex\": false}]},\n\"post_processor\": null, \"decoder\": {\"type\": \"ByteLevel\"},\n"
             "\"model\": {\"type\": \"BPE\", \"ignore_merges\": true, \"vocab\": ");
    seed_files(&v, &m, 0, 0);
    v.n = (size_t)(strstr(v.p, ", \"<|endoftext|>\"") - v.p); /* the vocabulary without its last entries */
    put(o, v.p, v.n);
    puts_(o, "}, \"merges\": [");
    for (i = 0; i < N_MERGES; i++) {
        puts_(o, i ? ", [\"" : "[\"");
        put_token(o, k_merges[i][0], strlen(k_merges[i][0]), 1);
        puts_(o, "\", \"");
        put_token(o, k_merges[i][1], strlen(k_merges[i][1]), 1);
        puts_(o, "\"]");
    }
    puts_(o, "]}}\n");
    free(v.p);
    free(m.p);
}

/* seed i as one input (vocab NUL merges NUL text) */
static void make_seed(int i, fz_buf *out) {
    fz_buf v = {0}, m = {0};
    static const char *const texts[] = {" the 12 words, it's \xC3\xA9\n\n", "", "\xFF\xFE\x80 \xE2\x80\xA8 x",
                                        "", "", "", "", "the TODO <|endoftext|> 12345 it'S \xC3\xA9\n\n x",
                                        "the TODO <|endoftext|>  \xC3\xA9\xE4\xB8\x80\xFF\n"};
    out->n = 0;
    if (i <= 2) seed_files(&v, &m, i == 1, i == 2);
    else if (i == 3) { puts_(&v, "{\"a\": 0}"); puts_(&m, "a a\n"); }              /* bytes missing */
    else if (i == 4) { puts_(&v, "{\"a\": 16777216, \"a\": 1}"); puts_(&m, ""); } /* an id over 2^24 - 1, a duplicate */
    else if (i == 6) { puts_(&v, "{\"\": 0}"); puts_(&m, "a a\n"); } /* finding: an empty token, no bytes at all */
    else if (i == 5) { seed_files(&v, &m, 0, 0); puts_(&m, "h e x\nq\n"); }     /* a bad merge line */
    else if (i >= 7) seed_hf(&v, i == 8);                                         /* tokenizer.json */
    put(out, v.p ? v.p : "", v.n);
    put(out, "", 1);
    put(out, m.p ? m.p : "", m.n);
    put(out, "", 1);
    puts_(out, texts[i]);
    free(v.p);
    free(m.p);
}
#define N_SEEDS 9

static int write_seeds(const char *dir) {
    char p[600];
    int i, ok = 1;
    fz_buf s = {0};
    mkdir(dir, 0755);
    for (i = 0; i < N_SEEDS; i++) {
        FILE *f;
        make_seed(i, &s);
        snprintf(p, sizeof p, "%s/tokenizer%d", dir, i);
        f = fopen(p, "wb");
        if (!f || fwrite(s.p, 1, s.n, f) != s.n) ok = 0;
        if (f && fclose(f) != 0) ok = 0;
    }
    free(s.p);
    if (!ok) fprintf(stderr, "fuzz_tokenizer: could not write seeds to %s\n", dir);
    return ok ? 0 : 2;
}

/* the shared main: --write-seeds, --mutate, replay (tests/fuzz_main.h) */
#define FZ_NAME "fuzz_tokenizer"
#define FZ_CAP (1 << 14)
static const unsigned char fz_interesting[] = {0, '"', '\\', '{', '}', ',', ':', ' ', '\n', '\r', '#', '0', '9',
                                               'u', 0x80, 0xc4, 0xa0, 0xed, 0xf4, 0xff};
static int fz_seeds(unsigned char **seed, size_t *len) {
    int i;
    for (i = 0; i < N_SEEDS; i++) {
        fz_buf b;
        memset(&b, 0, sizeof b);
        make_seed(i, &b);
        seed[i] = (unsigned char *)b.p;
        len[i] = b.n;
    }
    return N_SEEDS;
}
#include "tests/fuzz_main.h"
#endif
