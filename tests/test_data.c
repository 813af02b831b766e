/* tests/test_data.c - tokenizers, token shards, text files and the loader
   (extras/train_data.h).

   The GPT-2 BPE tokenizer is tested on a small vocabulary written here into
   a temporary directory in the Hugging Face layout (vocab.json +
   merges.txt). The real GPT-2 files are not in the repository; they load
   with the same code. */
#define TRAIN_IMPLEMENTATION
#include "train.h"
#include "extras/train_data.h"
#include "tests/check.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char g_dir[64];

static const char *tmp_path(const char *name) {
    static char buf[4][256];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", g_dir, name);
    return buf[k];
}

static void write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, n, f) != n) { perror(path); exit(1); }
    fclose(f);
}

static void write_str(const char *path, const char *s) { write_file(path, s, strlen(s)); }

/* ---- GPT-2's byte alphabet, derived here independently of train.h ---- */
static unsigned cp_of_byte[256];

static void make_alphabet(void) {
    int b, k = 0;
    for (b = 0; b < 256; b++) {
        int visible = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        cp_of_byte[b] = visible ? (unsigned)b : 256u + (unsigned)k++;
    }
}

/* a token (its bytes) written as a JSON string in GPT-2's alphabet; every
   other character as a \uXXXX escape, the rest as raw UTF-8, so that the
   reader sees both */
static void json_token(FILE *f, const char *bytes, size_t n, int escape) {
    size_t i;
    fputc('"', f);
    for (i = 0; i < n; i++) {
        unsigned c = cp_of_byte[(unsigned char)bytes[i]];
        if (c == '"' || c == '\\') fprintf(f, "\\%c", (char)c);
        else if (c < 0x80 && !escape) fputc((int)c, f);
        else if (escape || c < 0x80) fprintf(f, "\\u%04x", c);
        else if (c < 0x800) { fputc((int)(0xC0 | (c >> 6)), f); fputc((int)(0x80 | (c & 0x3F)), f); }
    }
    fputc('"', f);
}

/* the merges of the test vocabulary, best first; ids of merged tokens are
   256 + index. Ġ is the space, Ċ the newline. */
static const char *k_merges[][2] = {
    {" ", "t"},   /* 256 " t"    */
    {"h", "e"},   /* 257 "he"    */
    {" t", "he"}, /* 258 " the"  */
    {"b", "c"},   /* 259 "bc"    */
    {"a", "b"},   /* 260 "ab"    */
    {"'", "s"},   /* 261 "'s"    */
    {"1", "2"},   /* 262 "12"    */
    {"\n", "\n"}, /* 263 "\n\n"  */
    {"\xC3", "\xA9"}, /* 264 "é" (its two UTF-8 bytes) */
    {" ", " "},   /* 265 "  "    */
};
#define N_MERGES ((int)(sizeof k_merges / sizeof k_merges[0]))
#define ID_EOT 300
#define ID_EMOJI 301

/* the byte b gets id (b * 7 + 3) % 256: ids are deliberately not bytes */
static int byte_tok(int b) { return (b * 7 + 3) % 256; }

static void write_merge_side(FILE *f, const char *s) {
    size_t i;
    for (i = 0; s[i]; i++) {
        unsigned c = cp_of_byte[(unsigned char)s[i]];
        if (c < 0x80) fputc((int)c, f);
        else { fputc((int)(0xC0 | (c >> 6)), f); fputc((int)(0x80 | (c & 0x3F)), f); }
    }
}

/* order: the merges in the order to list them (a permutation of k_merges) */
static void write_bpe_files(const char *vocab, const char *merges, const int *order) {
    FILE *f = fopen(vocab, "wb");
    int b, i;
    char s[2] = {0, 0};
    if (!f) { perror(vocab); exit(1); }
    fputs("{\n", f);
    for (b = 0; b < 256; b++) {
        s[0] = (char)b;
        json_token(f, s, 1, b % 2);
        fprintf(f, ": %d,\n", byte_tok(b));
    }
    for (i = 0; i < N_MERGES; i++) {
        char both[8];
        snprintf(both, sizeof both, "%s%s", k_merges[i][0], k_merges[i][1]);
        json_token(f, both, strlen(both), i % 2);
        fprintf(f, ": %d,\n", 256 + i);
    }
    fprintf(f, "\"<|endoftext|>\": %d, \"x\\ud83d\\ude00\" : %d }\n", ID_EOT, ID_EMOJI);
    fclose(f);
    f = fopen(merges, "wb");
    if (!f) { perror(merges); exit(1); }
    fputs("#version: 0.2\n", f);
    for (i = 0; i < N_MERGES; i++) {
        write_merge_side(f, k_merges[order[i]][0]);
        fputc(' ', f);
        write_merge_side(f, k_merges[order[i]][1]);
        fputs(i == 3 ? "\r\n" : "\n", f); /* one Windows line end */
    }
    fclose(f);
}

/* the pieces of GPT-2's pre-tokenizer joined with '|' */
static const char *pieces(const char *s) {
    static char out[512];
    size_t n = strlen(s), pos = 0, o = 0;
    while (pos < n && o + 2 < sizeof out) {
        size_t k = trn_bpe_pretoken_len(s + pos, n - pos);
        if (k == 0 || k > n - pos) return "(bad length)";
        if (pos) out[o++] = '|';
        memcpy(out + o, s + pos, k < sizeof out - o - 1 ? k : sizeof out - o - 1);
        o += k;
        pos += k;
    }
    out[o < sizeof out ? o : sizeof out - 1] = 0;
    return out;
}

static int encode_is(const trn_tokenizer *tok, const char *text, const int *want, size_t n_want) {
    trn_tokens t = {0};
    int ok = trn_tokenizer_encode(tok, text, strlen(text), &t) == TRN_OK && t.n == n_want &&
             (n_want == 0 || memcmp(t.ids, want, n_want * sizeof(int)) == 0);
    if (!ok) {
        size_t i;
        printf("  encode \"%s\": got", text);
        for (i = 0; i < t.n; i++) printf(" %d", t.ids[i]);
        printf("\n");
    }
    trn_tokens_free(&t);
    return ok;
}

static void test_pretokenizer(void) {
    static const char *cases[][2] = {
        {"Hello world", "Hello| world"},
        {"don't stop", "don|'t| stop"},
        {"we'll I'M they're", "we|'ll| I|'|M| they|'re"},
        {"abc123 4.5", "abc|123| 4|.|5"},
        {"a  b", "a| | b"},
        {"a\n\nb", "a|\n|\n|b"},
        {"x   ", "x|   "},
        {"hi!!! ?", "hi|!!!| ?"},
        {"caf\xC3\xA9 \xE4\xB8\xAD\xE6\x96\x87\xE3\x80\x82", "caf\xC3\xA9| \xE4\xB8\xAD\xE6\x96\x87|\xE3\x80\x82"},
        {"\t\tx", "\t|\t|x"},
        {"'sup 's", "'s|up| '|s"},
        {" \xC2\xA0x", " |\xC2\xA0|x"},            /* U+00A0 is whitespace */
        {"x\n", "x|\n"},
        {"\xFF\xFEz", "\xFF\xFE|z"},               /* invalid UTF-8: "other" */
        {"\xE4\xB8", "\xE4\xB8"},                  /* truncated character   */
    };
    size_t i;
    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *got = pieces(cases[i][0]);
        CHECK(strcmp(got, cases[i][1]) == 0, "pre-tokenize case %zu: got \"%s\" want \"%s\"\n", i, got, cases[i][1]);
    }
    CHECK(trn_bpe_pretoken_len("", 0) == 0, "empty text has no piece\n");
}

static void test_bytes_tokenizer(void) {
    trn_tokenizer tok;
    trn_tokens t = {0};
    char text[300], back[300];
    size_t i, len;
    const char *s;
    for (i = 0; i < sizeof text; i++) text[i] = (char)(i * 31 + 7);
    trn_tokenizer_init_bytes(&tok);
    CHECK(tok.vocab_size == 256 && tok.eot_id == -1, "bytes: vocab %d eot %d\n", tok.vocab_size, tok.eot_id);
    CHECK(trn_tokenizer_encode(&tok, text, sizeof text, &t) == TRN_OK && t.n == sizeof text, "bytes: encode\n");
    CHECK(t.ids[0] == 7 && t.ids[1] == 38 && t.ids[8] == (unsigned char)(8 * 31 + 7), "bytes: ids are byte values\n");
    CHECK(trn_tokenizer_decode(&tok, t.ids, t.n, back, sizeof back) == sizeof text, "bytes: decode length\n");
    CHECK(memcmp(text, back, sizeof back - 1) == 0, "bytes: round trip\n");
    s = trn_tokenizer_token(&tok, 65, &len);
    CHECK(s && len == 1 && s[0] == 'A', "bytes: token 65 is 'A'\n");
    CHECK(trn_tokenizer_token(&tok, 256, &len) == NULL && len == 0, "bytes: id 256 has no token\n");
    CHECK(trn_tokenizer_find(&tok, "A", 1) == 65, "bytes: find\n");
    /* decode truncates like snprintf and still returns the full length */
    CHECK(trn_tokenizer_decode(&tok, t.ids, 10, back, 4) == 10 && back[3] == 0 && back[0] == text[0],
          "bytes: snprintf-like decode\n");
    trn_tokens_free(&t);
    trn_tokenizer_free(&tok);
}

static void test_bpe(void) {
    static const int order_file[N_MERGES] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
    static const int order_swap[N_MERGES] = {0, 1, 2, 4, 3, 5, 6, 7, 8, 9}; /* "a b" before "b c" */
    trn_tokenizer tok, tok2;
    trn_tokens t = {0};
    char vocab[256], merges[256];
    const char *text = "The cat's 12 bytes\n\n  café, the end! don't \xF0\x9F\x98\x80 \xFF\x80 x";
    char back[256];
    size_t len;
    int id;

    strcpy(vocab, tmp_path("vocab.json"));
    strcpy(merges, tmp_path("merges.txt"));
    write_bpe_files(vocab, merges, order_file);
    CHECK(trn_tokenizer_load_bpe_dir(&tok, g_dir) == TRN_OK, "bpe: load: %s\n", trn_error_reason());
    CHECK(tok.kind == TRN_TOKENIZER_BPE && tok.vocab_size == 302 && tok.n_merges == N_MERGES,
          "bpe: vocab %d merges %d\n", tok.vocab_size, tok.n_merges);
    CHECK(tok.eot_id == ID_EOT, "bpe: <|endoftext|> is id %d\n", tok.eot_id);
    CHECK(tok.byte_id['a'] == byte_tok('a') && tok.byte_id[0] == byte_tok(0) && tok.byte_id[255] == byte_tok(255),
          "bpe: single-byte ids\n");
    /* JSON escapes: \u0120 etc. came back as the right bytes, and a
       surrogate pair (outside GPT-2's alphabet) as its UTF-8 bytes */
    CHECK(trn_tokenizer_find(&tok, " the", 4) == 258 && trn_tokenizer_find(&tok, "\n\n", 2) == 263,
          "bpe: escaped keys\n");
    CHECK(trn_tokenizer_find(&tok, "x\xF0\x9F\x98\x80", 5) == ID_EMOJI, "bpe: surrogate pair key\n");
    CHECK(trn_tokenizer_find(&tok, "zz", 2) == -1, "bpe: absent token\n");

    { /* merges in rank order: "b c" (rank 3) beats "a b" (rank 4) */
        int abc[2] = {byte_tok('a'), 259}, ab[1] = {260}, the[1] = {258}, the2[2] = {byte_tok('t'), 257};
        int cats[4] = {258, byte_tok(' '), byte_tok('c'), 0};
        CHECK(encode_is(&tok, "abc", abc, 2), "bpe: abc -> a bc\n");
        CHECK(encode_is(&tok, "ab", ab, 1), "bpe: ab -> ab\n");
        CHECK(encode_is(&tok, " the", the, 1), "bpe: ' the' merges twice\n");
        CHECK(encode_is(&tok, "the", the2, 2), "bpe: 'the' -> t he (no leading space)\n");
        cats[3] = byte_tok('a');
        CHECK(encode_is(&tok, " the ca", cats, 4), "bpe: pieces do not merge across boundaries\n");
        { /* "   x": the whitespace piece "  " (merged), then " x" */
          int w[3]; w[0] = 265; w[1] = byte_tok(' '); w[2] = byte_tok('x');
          CHECK(encode_is(&tok, "   x", w, 3), "bpe: spaces before a word\n"); }
        { int c[2] = {byte_tok('t'), 261}; /* pieces "t" and "'s" */
          CHECK(encode_is(&tok, "t's", c, 2), "bpe: contraction 's\n"); }
        { int e[2] = {byte_tok('f'), 264};
          CHECK(encode_is(&tok, "f\xC3\xA9", e, 2), "bpe: non-ASCII letter merges its bytes\n"); }
        { int n[2] = {262, byte_tok('3')};
          CHECK(encode_is(&tok, "123", n, 2), "bpe: digits\n"); }
    }
    (void)trn_tokenizer_encode(&tok, text, strlen(text), &t);
    CHECK(t.n > 0 && t.n < strlen(text), "bpe: %zu tokens for %zu bytes\n", t.n, strlen(text));
    CHECK(trn_tokens_check(t.ids, t.n, tok.vocab_size) == TRN_OK, "bpe: ids in range\n");
    len = trn_tokenizer_decode(&tok, t.ids, t.n, back, sizeof back);
    CHECK(len == strlen(text) && strcmp(back, text) == 0, "bpe: round trip \"%s\"\n", back);
    { int eot = tok.eot_id; size_t n; const char *s = trn_tokenizer_token(&tok, eot, &n);
      CHECK(s && n == 13 && memcmp(s, "<|endoftext|>", 13) == 0, "bpe: eot decodes to its text\n"); }
    CHECK(trn_tokenizer_token(&tok, 299, &len) == NULL, "bpe: an id without a token decodes to nothing\n");
    id = 50000;
    CHECK(trn_tokenizer_decode(&tok, &id, 1, back, sizeof back) == 0, "bpe: out-of-vocab id decodes to nothing\n");
    trn_tokens_free(&t);

    /* the same vocabulary with "a b" ranked before "b c" */
    write_bpe_files(tmp_path("vocab.json"), tmp_path("merges2.txt"), order_swap);
    CHECK(trn_tokenizer_load_bpe(&tok2, vocab, tmp_path("merges2.txt")) == TRN_OK, "bpe: load swapped\n");
    { int abc[2] = {260, byte_tok('c')};
      CHECK(encode_is(&tok2, "abc", abc, 2), "bpe: with ranks swapped abc -> ab c\n"); }
    trn_tokenizer_free(&tok2);
    trn_tokenizer_free(&tok);
}

static trn_result load_with(const char *vocab_text, const char *merges_text) {
    trn_tokenizer tok;
    trn_result r;
    if (vocab_text) write_str(tmp_path("bad_vocab.json"), vocab_text);
    if (merges_text) write_str(tmp_path("bad_merges.txt"), merges_text);
    r = trn_tokenizer_load_bpe(&tok, tmp_path(vocab_text ? "bad_vocab.json" : "vocab.json"),
                               tmp_path(merges_text ? "bad_merges.txt" : "merges.txt"));
    trn_tokenizer_free(&tok); /* safe after a failed load */
    return r;
}

static void test_bpe_errors(void) {
    static const int order[N_MERGES] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
    trn_tokenizer tok;
    char *vocab;
    size_t n, cut;
    int crashed_or_ok = 0;
    FILE *f;
    write_bpe_files(tmp_path("vocab.json"), tmp_path("merges.txt"), order);
    CHECK(trn_tokenizer_load_bpe(&tok, tmp_path("nope.json"), tmp_path("merges.txt")) == TRN_ERR_IO,
          "missing vocab.json: IO error\n");
    CHECK(strstr(trn_error_reason(), "nope.json") != NULL, "the reason names the file: %s\n", trn_error_reason());
    CHECK(trn_tokenizer_load_bpe_dir(&tok, "/nonexistent/dir") == TRN_ERR_IO, "missing directory: IO error\n");

    /* every truncation of a valid vocab.json is a format error, never a crash */
    f = fopen(tmp_path("vocab.json"), "rb");
    fseek(f, 0, SEEK_END); n = (size_t)ftell(f); fseek(f, 0, SEEK_SET);
    vocab = (char *)malloc(n + 1);
    CHECK(fread(vocab, 1, n, f) == n, "read vocab back\n");
    fclose(f);
    for (cut = 0; cut + 2 < n; cut += 1 + cut / 64) {
        trn_result r;
        write_file(tmp_path("cut.json"), vocab, cut);
        r = trn_tokenizer_load_bpe(&tok, tmp_path("cut.json"), tmp_path("merges.txt"));
        if (r != TRN_ERR_FORMAT) { crashed_or_ok++; printf("  cut at %zu: %s\n", cut, trn_result_string(r)); }
    }
    CHECK(crashed_or_ok == 0, "truncated vocab.json: %d cuts did not give TRN_ERR_FORMAT\n", crashed_or_ok);
    f = fopen(tmp_path("bom.json"), "wb"); /* the same file after a UTF-8 byte order mark */
    fputs("\xEF\xBB\xBF", f);
    fwrite(vocab, 1, n, f);
    fclose(f);
    CHECK(trn_tokenizer_load_bpe(&tok, tmp_path("bom.json"), tmp_path("merges.txt")) == TRN_OK,
          "vocab.json with a byte order mark: %s\n", trn_error_reason());
    trn_tokenizer_free(&tok);
    free(vocab);

    CHECK(load_with("{\"a\": 1", NULL) == TRN_ERR_FORMAT, "unterminated object\n");
    CHECK(load_with("[1, 2]", NULL) == TRN_ERR_FORMAT, "not an object\n");
    CHECK(load_with("{\"a\": -1}", NULL) == TRN_ERR_FORMAT, "negative id\n");
    CHECK(load_with("{\"a\": 1.5}", NULL) == TRN_ERR_FORMAT, "fractional id\n");
    CHECK(load_with("{\"a\": 99999999999}", NULL) == TRN_ERR_FORMAT, "huge id\n");
    CHECK(load_with("{\"\\ud83d\": 1}", NULL) == TRN_ERR_FORMAT, "lone high surrogate\n");
    CHECK(load_with("{\"\\ude00\": 1}", NULL) == TRN_ERR_FORMAT, "lone low surrogate\n");
    CHECK(load_with("{\"\\uZZZZ\": 1}", NULL) == TRN_ERR_FORMAT, "bad hex escape\n");
    CHECK(load_with("{\"a\xFF\": 1}", NULL) == TRN_ERR_FORMAT, "invalid UTF-8 in a key\n");
    CHECK(load_with("{\"a\": 1} x", NULL) == TRN_ERR_FORMAT, "text after the object\n");
    CHECK(load_with("{}", NULL) == TRN_ERR_FORMAT, "empty vocabulary\n");
    CHECK(load_with("{\"a\": 0, \"b\": 1}", NULL) == TRN_ERR_FORMAT, "a vocabulary without all 256 bytes\n");
    CHECK(strstr(trn_error_reason(), "byte") != NULL, "reason: %s\n", trn_error_reason());
    CHECK(load_with("{\"a\": 0, \"b\": 0}", NULL) == TRN_ERR_FORMAT, "one id for two tokens\n");
    CHECK(load_with("{\"a\": 0, \"a\": 1}", NULL) == TRN_ERR_FORMAT, "one token twice\n");
    CHECK(load_with(NULL, "#version: 0.2\nq z\n") == TRN_ERR_FORMAT, "merge of a pair whose result is not a token\n");
    CHECK(load_with(NULL, "a b c\n") == TRN_ERR_FORMAT, "merge line with three fields\n");
    CHECK(strstr(trn_error_reason(), "line 1") != NULL, "reason names the line: %s\n", trn_error_reason());
    CHECK(load_with(NULL, "ab\n") == TRN_ERR_FORMAT, "merge line with one field\n");
    CHECK(load_with(NULL, "\xC4\xA0 zzz\n") == TRN_ERR_FORMAT, "merge naming an unknown token\n");
    CHECK(load_with(NULL, "\xFF b\n") == TRN_ERR_FORMAT, "merge line with invalid UTF-8\n");
    CHECK(load_with(NULL, "") == TRN_OK, "an empty merges.txt is fine (bytes only)\n");
}

static void test_shards(void) {
    int ids[1000], i;
    trn_tokens t = {0};
    unsigned char raw[1024 + 2000 + 1] = {0};
    const char *path = tmp_path("s.bin");
    FILE *f;
    for (i = 0; i < 1000; i++) ids[i] = (i * 7919) % 65536;
    ids[0] = 0; ids[1] = 65535;
    CHECK(trn_token_shard_write(path, ids, 1000) == TRN_OK, "shard write: %s\n", trn_error_reason());
    CHECK(access(tmp_path("s.bin.tmp"), F_OK) != 0, "no temp file left behind\n");
    CHECK(trn_token_shard_read(&t, path) == TRN_OK && t.n == 1000, "shard read: %s\n", trn_error_reason());
    CHECK(t.n == 1000 && memcmp(t.ids, ids, sizeof ids) == 0, "shard round trip\n");
    CHECK(trn_token_shard_read(&t, path) == TRN_OK && t.n == 2000 && t.ids[1000] == 0 && t.ids[1001] == 65535,
          "shard read appends\n");
    trn_tokens_free(&t);

    /* the exact bytes: llm.c's header layout, little endian */
    f = fopen(path, "rb");
    CHECK(f && fread(raw, 1, sizeof raw, f) == 1024 + 2000, "shard is 1024 + 2*N bytes\n");
    if (f) fclose(f);
    CHECK(raw[0] == (20240520 & 0xFF) && raw[1] == ((20240520 >> 8) & 0xFF) && raw[4] == 1 && raw[8] == (1000 & 0xFF) &&
          raw[9] == (1000 >> 8) && raw[1024 + 2] == 0xFF && raw[1024 + 3] == 0xFF, "shard header bytes\n");

    /* corrupt shards */
    raw[0] ^= 1;
    write_file(tmp_path("magic.bin"), raw, 1024 + 2000);
    CHECK(trn_token_shard_read(&t, tmp_path("magic.bin")) == TRN_ERR_FORMAT, "bad magic\n");
    CHECK(strstr(trn_error_reason(), "magic") != NULL, "reason: %s\n", trn_error_reason());
    raw[0] ^= 1;
    raw[4] = 2;
    write_file(tmp_path("version.bin"), raw, 1024 + 2000);
    CHECK(trn_token_shard_read(&t, tmp_path("version.bin")) == TRN_ERR_FORMAT, "bad version\n");
    raw[4] = 1;
    write_file(tmp_path("trunc.bin"), raw, 1024 + 1999);
    CHECK(trn_token_shard_read(&t, tmp_path("trunc.bin")) == TRN_ERR_FORMAT, "truncated shard\n");
    CHECK(strstr(trn_error_reason(), "truncated") != NULL, "reason: %s\n", trn_error_reason());
    write_file(tmp_path("long.bin"), raw, 1024 + 2000 + 1);
    CHECK(trn_token_shard_read(&t, tmp_path("long.bin")) == TRN_ERR_FORMAT, "shard longer than its header says\n");
    write_file(tmp_path("short.bin"), raw, 100);
    CHECK(trn_token_shard_read(&t, tmp_path("short.bin")) == TRN_ERR_FORMAT, "shard shorter than a header\n");
    raw[11] = 0x80; /* negative count */
    write_file(tmp_path("neg.bin"), raw, 1024 + 2000);
    CHECK(trn_token_shard_read(&t, tmp_path("neg.bin")) == TRN_ERR_FORMAT, "negative token count\n");
    CHECK(trn_token_shard_read(&t, tmp_path("absent.bin")) == TRN_ERR_IO, "missing shard\n");
    CHECK(t.n == 0, "failed reads added nothing\n");

    ids[5] = 70000;
    CHECK(trn_token_shard_write_bits(tmp_path("big.bin"), ids, 10, 16) == TRN_ERR_INVALID,
          "id > 65535 cannot be written as uint16\n");
    CHECK(strstr(trn_error_reason(), "70000") && strstr(trn_error_reason(), "position 5"), "reason: %s\n",
          trn_error_reason());
    ids[5] = -1;
    CHECK(trn_token_shard_write(tmp_path("big.bin"), ids, 10) == TRN_ERR_INVALID, "negative id cannot be written\n");
    CHECK(access(tmp_path("big.bin"), F_OK) != 0, "nothing written on error\n");
    CHECK(trn_token_shard_write("/nonexistent/dir/x.bin", ids, 1) == TRN_ERR_IO, "unwritable path\n");
    trn_tokens_free(&t);
}

/* one line, naming the file */
static int one_line_naming(const char *path) {
    const char *r = trn_error_reason();
    return strchr(r, '\n') == NULL && strstr(r, path) != NULL;
}

/* 32-bit shards (llm.c's "llama-3" format: magic 20240801, version 7, uint32
   ids): Llama 3's 128,256-token vocabulary does not fit uint16 */
static void test_shards32(void) {
    enum { N = 3000 };
    static int ids[N];
    static unsigned char raw[1024 + 4 * N + 1];
    trn_tokens t = {0};
    char path[300];
    int i, bits = 0, same = 1;
    FILE *f;
    for (i = 0; i < N; i++) ids[i] = (int)(((long long)i * 104729) % 128256);
    snprintf(path, sizeof path, "%s", tmp_path("s32.bin")); /* (tmp_path's buffers rotate) */
    ids[0] = 65535; ids[1] = 65536; ids[2] = 128255; ids[3] = 0; ids[4] = INT32_MAX;
    /* auto width: an id > 65535 makes it uint32 */
    CHECK(trn_token_shard_write(path, ids, N) == TRN_OK, "shard32 write: %s\n", trn_error_reason());
    CHECK(trn_token_shard_read_bits(&t, path, &bits) == TRN_OK && t.n == N && bits == 32, "shard32 read: %s (bits %d)\n",
          trn_error_reason(), bits);
    for (i = 0; i < N && t.n == N; i++) same &= t.ids[i] == ids[i];
    CHECK(t.n == N && same, "shard32 round trip: ids above 65535 come back\n");
    trn_tokens_free(&t);
    f = fopen(path, "rb");
    CHECK(f && fread(raw, 1, sizeof raw, f) == 1024 + 4 * N, "shard32 is 1024 + 4*N bytes\n");
    if (f) fclose(f);
    /* llm.c's header: 20240801 = 0x0134D9A1, version 7, count; ids little endian */
    CHECK(raw[0] == 0xA1 && raw[1] == 0xD9 && raw[2] == 0x34 && raw[3] == 0x01 && raw[4] == 7 && raw[5] == 0 &&
          raw[8] == (N & 0xFF) && raw[9] == (N >> 8) && raw[1024 + 4] == 0 && raw[1024 + 5] == 0 &&
          raw[1024 + 6] == 1 && raw[1024 + 7] == 0, "shard32 header and id bytes (llm.c's layout)\n");
    /* a uint16 shard still reads as before, and says so */
    for (i = 0; i < N; i++) ids[i] &= 0xFFFF;
    CHECK(trn_token_shard_write(tmp_path("s16.bin"), ids, N) == TRN_OK &&
          trn_token_shard_read_bits(&t, tmp_path("s16.bin"), &bits) == TRN_OK && bits == 16 && t.n == N &&
          t.ids[1] == 0 && t.ids[0] == 65535, "small ids: a uint16 shard, read back as 16 bits\n");
    trn_tokens_free(&t);
    /* an explicit width: 32 for small ids (llm.c's Llama 3 loader wants version 7) */
    CHECK(trn_token_shard_write_bits(tmp_path("w32.bin"), ids, 10, 32) == TRN_OK &&
          trn_token_shard_read_bits(&t, tmp_path("w32.bin"), &bits) == TRN_OK && bits == 32 && t.n == 10 &&
          t.ids[0] == 65535, "--bits 32 with small ids\n");
    trn_tokens_free(&t);
    CHECK(trn_token_shard_write_bits(tmp_path("w24.bin"), ids, 10, 24) == TRN_ERR_INVALID, "24 bits refused\n");
    /* the loader carries ids above 65535 unchanged */
    {
        trn_loader L;
        trn_loader_desc d;
        int x[2 * 8], y[2 * 8], ok = 1;
        memset(&d, 0, sizeof d);
        d.B = 2; d.T = 8; d.sequential = 1; d.no_val = 1;
        CHECK(trn_token_shard_read(&t, path) == TRN_OK, "read: %s\n", trn_error_reason());
        CHECK(trn_tokens_check(t.ids, t.n, 128256) == TRN_ERR_MISMATCH, "INT32_MAX is outside vocab 128,256\n");
        t.ids[4] = 128255;
        CHECK(trn_tokens_check(t.ids, t.n, 128256) == TRN_OK, "every id < 128,256\n");
        CHECK(trn_loader_init(&L, t.ids, t.n, &d) == TRN_OK, "loader: %s\n", trn_error_reason());
        trn_loader_next(&L, x, y);
        for (i = 0; i < 8; i++) ok &= x[i] == t.ids[i] && y[i] == t.ids[i + 1];
        CHECK(ok && x[1] == 65536 && x[2] == 128255, "loader batch: ids above 65535 intact (x[1] %d x[2] %d)\n", x[1],
              x[2]);
        trn_loader_free(&L);
        trn_tokens_free(&t);
    }
    /* strict reads: each refusal one line naming the file, nothing appended */
    write_file(tmp_path("t32.bin"), raw, 1024 + 4 * N - 1);
    CHECK(trn_token_shard_read(&t, tmp_path("t32.bin")) == TRN_ERR_FORMAT && one_line_naming(tmp_path("t32.bin")) &&
          strstr(trn_error_reason(), "truncated"), "truncated uint32 shard: %s\n", trn_error_reason());
    write_file(tmp_path("l32.bin"), raw, 1024 + 4 * N + 1);
    CHECK(trn_token_shard_read(&t, tmp_path("l32.bin")) == TRN_ERR_FORMAT && one_line_naming(tmp_path("l32.bin")),
          "oversized uint32 shard: %s\n", trn_error_reason());
    write_file(tmp_path("h32.bin"), raw, 1024 + 2 * N); /* the size a uint16 shard of N would have */
    CHECK(trn_token_shard_read(&t, tmp_path("h32.bin")) == TRN_ERR_FORMAT, "uint32 header over uint16-sized data\n");
    raw[4] = 1; /* the uint32 magic with the uint16 version */
    write_file(tmp_path("v32.bin"), raw, 1024 + 4 * N);
    CHECK(trn_token_shard_read(&t, tmp_path("v32.bin")) == TRN_ERR_FORMAT && one_line_naming(tmp_path("v32.bin")) &&
          strstr(trn_error_reason(), "version 1"), "magic 20240801 with version 1: %s\n", trn_error_reason());
    raw[0] = 0x88; raw[1] = 0xD8; raw[4] = 7; /* the uint16 magic with the uint32 version */
    write_file(tmp_path("v16.bin"), raw, 1024 + 4 * N);
    CHECK(trn_token_shard_read(&t, tmp_path("v16.bin")) == TRN_ERR_FORMAT && one_line_naming(tmp_path("v16.bin")) &&
          strstr(trn_error_reason(), "version 7"), "magic 20240520 with version 7: %s\n", trn_error_reason());
    raw[0] = 0xA1; raw[1] = 0xD9;
    raw[1024 + 4 * 17 + 3] = 0x80; /* id 17 >= 2^31 */
    write_file(tmp_path("n32.bin"), raw, 1024 + 4 * N);
    CHECK(trn_token_shard_read(&t, tmp_path("n32.bin")) == TRN_ERR_FORMAT && one_line_naming(tmp_path("n32.bin")) &&
          strstr(trn_error_reason(), "position 17"), "an id >= 2^31: %s\n", trn_error_reason());
    CHECK(t.n == 0, "failed reads added nothing (%zu ids)\n", t.n);
    /* trn_tokens_load knows the uint32 magic under any name */
    raw[1024 + 4 * 17 + 3] = 0;
    write_file(tmp_path("s32.txt"), raw, 1024 + 4 * N);
    CHECK(trn_tokens_load(&t, tmp_path("s32.txt"), NULL) == TRN_OK && t.n == N && t.ids[2] == 128255,
          "a uint32 shard named .txt is read as a shard: %s\n", trn_error_reason());
    CHECK(trn_token_shard_sniff(tmp_path("s32.txt")) && trn_token_shard_sniff(tmp_path("s16.bin")) &&
          !trn_token_shard_sniff(tmp_path("absent.bin")), "sniff: both magics\n");
    trn_tokens_free(&t);
}

static void test_tokens_load(void) {
    trn_tokenizer tok;
    trn_tokens t = {0};
    int ids[3] = {5, 6, 7};
    const char *paths[3];
    char *text;
    size_t len;
    trn_tokenizer_init_bytes(&tok);
    write_str(tmp_path("a.txt"), "hello ");
    write_str(tmp_path("b.txt"), "world");
    write_str(tmp_path("empty.txt"), "");
    CHECK(trn_tokens_load(&t, tmp_path("a.txt"), &tok) == TRN_OK && t.n == 6 && t.ids[0] == 'h', "text file\n");
    CHECK(trn_token_shard_write(tmp_path("shard.txt"), ids, 3) == TRN_OK, "write shard with a .txt name\n");
    CHECK(trn_tokens_load(&t, tmp_path("shard.txt"), &tok) == TRN_OK && t.n == 9 && t.ids[6] == 5,
          "a shard is recognized by its magic\n");
    trn_tokens_free(&t);
    write_str(tmp_path("fake.bin"), "this is text, not a shard, but it is named .bin and is long enough");
    CHECK(trn_tokens_load(&t, tmp_path("fake.bin"), &tok) == TRN_ERR_FORMAT, ".bin that is no shard\n");
    CHECK(trn_tokens_load(&t, tmp_path("empty.txt"), &tok) == TRN_ERR_INVALID, "empty file\n");
    CHECK(strstr(trn_error_reason(), "empty") != NULL, "reason: %s\n", trn_error_reason());
    CHECK(trn_token_shard_write(tmp_path("zero.bin"), ids, 0) == TRN_OK, "write a 0-token shard\n");
    CHECK(trn_tokens_load(&t, tmp_path("zero.bin"), &tok) == TRN_ERR_INVALID, "0-token shard\n");
    CHECK(trn_tokens_load(&t, tmp_path("absent.txt"), &tok) == TRN_ERR_IO, "missing data file\n");
    CHECK(t.n == 0, "nothing loaded\n");

    /* the default corpus: files concatenated, missing ones skipped if asked */
    paths[0] = tmp_path("a.txt"); paths[1] = tmp_path("absent.txt"); paths[2] = tmp_path("b.txt");
    CHECK(trn_text_read_files(&text, &len, paths, 3, 1) == TRN_OK && len == 11 && strcmp(text, "hello world") == 0,
          "read files: concatenation\n");
    trn_free(text);
    CHECK(trn_text_read_files(&text, &len, paths, 3, 0) == TRN_ERR_IO && text == NULL, "missing file, not ok\n");
    CHECK(strstr(trn_error_reason(), "absent.txt") != NULL, "reason: %s\n", trn_error_reason());
    CHECK(trn_text_read_files(&text, &len, paths + 1, 1, 1) == TRN_ERR_IO, "all files missing\n");
    CHECK(trn_text_read_files(&text, &len, paths, 0, 1) == TRN_ERR_IO, "no files\n");
    trn_tokens_free(&t);
    trn_tokenizer_free(&tok);
}

static void test_tokens_check(void) {
    int ids[5] = {1, 2, 255, 300, 4};
    CHECK(trn_tokens_check(ids, 3, 256) == TRN_OK, "ids in range\n");
    CHECK(trn_tokens_check(ids, 5, 256) == TRN_ERR_MISMATCH, "id >= vocab\n");
    CHECK(strstr(trn_error_reason(), "300") && strstr(trn_error_reason(), "position 3"), "reason: %s\n",
          trn_error_reason());
    ids[1] = -5;
    CHECK(trn_tokens_check(ids, 5, 256) == TRN_ERR_MISMATCH && strstr(trn_error_reason(), "position 1"),
          "negative id\n");
    CHECK(trn_tokens_check(ids, 5, 0) == TRN_ERR_INVALID, "vocab 0\n");
}

#define B_ 4
#define T_ 8

static int same_batches(trn_loader *a, trn_loader *b, int n) {
    int x1[B_ * T_], y1[B_ * T_], x2[B_ * T_], y2[B_ * T_], i;
    for (i = 0; i < n; i++) {
        trn_loader_next(a, x1, y1);
        trn_loader_next(b, x2, y2);
        if (memcmp(x1, x2, sizeof x1) || memcmp(y1, y2, sizeof y1)) return 0;
    }
    return 1;
}

static void test_loader(void) {
    enum { N = 1000 };
    static int tok[N];
    int x[B_ * T_], y[B_ * T_], x2[B_ * T_], y2[B_ * T_], seen[200];
    trn_loader a, b, c;
    trn_loader_desc d;
    trn_loader_pos pos;
    int i, r, ok, bad_rows = 0, dup = 0;
    int64_t k;
    for (i = 0; i < N; i++) tok[i] = i; /* a token is its own position */
    memset(&d, 0, sizeof d);
    d.B = B_; d.T = T_; d.seed = 42;
    CHECK(trn_loader_init(&a, tok, N, &d) == TRN_OK, "loader init: %s\n", trn_error_reason());
    CHECK(a.n_train == 900 && a.n_val == 100 && a.desc.val_fraction == 0.1f, "default split 90/10: %zu %zu\n",
          a.n_train, a.n_val);
    CHECK(a.train_windows == 899 / T_ && a.batches_per_epoch == (899 / T_) / B_ && a.val_batches == (99 / T_) / B_,
          "windows and batches: %zu %lld %lld\n", a.train_windows, (long long)a.batches_per_epoch,
          (long long)a.val_batches);

    /* every row is a window of the training split at a multiple of T; y is
       x shifted by one; no window repeats within an epoch */
    memset(seen, 0, sizeof seen);
    for (k = 0; k < a.batches_per_epoch; k++) {
        trn_loader_next(&a, x, y);
        for (r = 0; r < B_; r++) {
            int s = x[r * T_];
            ok = s % T_ == 0 && s + T_ < 900;
            for (i = 0; i < T_; i++) ok = ok && x[r * T_ + i] == s + i && y[r * T_ + i] == s + i + 1;
            bad_rows += !ok;
            if (ok && seen[s / T_]++) dup++;
        }
    }
    CHECK(bad_rows == 0 && dup == 0, "epoch rows: %d bad, %d repeated\n", bad_rows, dup);
    CHECK(a.pos.epoch == 0 && a.pos.batch == a.batches_per_epoch, "position at the end of epoch 0\n");
    trn_loader_next(&a, x, y);
    CHECK(a.pos.epoch == 1 && a.pos.batch == 1, "rolled into epoch 1\n");
    trn_loader_free(&a);

    /* same seed, same stream; another seed, another order */
    CHECK(trn_loader_init(&a, tok, N, &d) == TRN_OK && trn_loader_init(&b, tok, N, &d) == TRN_OK, "two loaders\n");
    CHECK(same_batches(&a, &b, 3 * 28 + 5), "same seed gives the same batches across epochs\n");
    trn_loader_free(&b);
    d.seed = 43;
    CHECK(trn_loader_init(&b, tok, N, &d) == TRN_OK, "loader seed 43\n");
    d.seed = 42;
    CHECK(trn_loader_init(&c, tok, N, &d) == TRN_OK, "loader seed 42\n");
    CHECK(!same_batches(&c, &b, 1), "another seed gives another order\n");
    trn_loader_free(&b);
    trn_loader_free(&c);

    /* save / restore: a fresh loader seeked to a saved position continues
       exactly like the original, also across an epoch boundary */
    for (k = 0; k < 20; k++) trn_loader_next(&a, x, y);
    pos = trn_loader_tell(&a);
    CHECK(trn_loader_init(&c, tok, N, &d) == TRN_OK && trn_loader_seek(&c, &pos) == TRN_OK, "seek: %s\n",
          trn_error_reason());
    CHECK(same_batches(&a, &c, 40), "restored loader gives identical next batches\n");
    trn_loader_free(&c);

    /* a position of a loader with another shape is refused */
    d.B = 2;
    CHECK(trn_loader_init(&c, tok, N, &d) == TRN_OK, "loader B=2\n");
    CHECK(trn_loader_seek(&c, &pos) == TRN_ERR_MISMATCH, "position from another batch shape\n");
    trn_loader_free(&c);
    d.B = B_;
    CHECK(trn_loader_init(&c, tok, N - 50, &d) == TRN_OK, "loader on other data\n");
    CHECK(trn_loader_seek(&c, &pos) == TRN_ERR_MISMATCH, "position from other data\n");
    trn_loader_free(&c);
    pos = trn_loader_tell(&a);
    pos.batch = a.batches_per_epoch + 1;
    CHECK(trn_loader_seek(&a, &pos) == TRN_ERR_INVALID, "position out of range\n");

    /* validation: fixed batches from the start of the validation split */
    trn_loader_val_batch(&a, 0, x, y);
    trn_loader_val_batch(&a, 0, x2, y2);
    CHECK(memcmp(x, x2, sizeof x) == 0 && memcmp(y, y2, sizeof y) == 0, "validation batch 0 is repeatable\n");
    CHECK(x[0] == 900 && y[0] == 901 && x[T_] == 900 + T_, "validation starts at the split\n");
    trn_loader_val_batch(&a, a.val_batches, x2, y2);
    CHECK(memcmp(x, x2, sizeof x) == 0, "validation batches wrap around\n");
    trn_loader_val_batch(&a, a.val_batches - 1, x, y);
    CHECK(y[B_ * T_ - 1] < N, "last validation batch stays inside the data\n");
    trn_loader_free(&a);

    /* llm.c's sequential order */
    d.sequential = 1;
    CHECK(trn_loader_init(&a, tok, N, &d) == TRN_OK, "sequential loader\n");
    trn_loader_next(&a, x, y);
    trn_loader_next(&a, x2, y2);
    ok = 1;
    for (i = 0; i < B_ * T_; i++) ok = ok && x[i] == i && y[i] == i + 1 && x2[i] == B_ * T_ + i;
    CHECK(ok, "sequential batches are consecutive tokens\n");
    trn_loader_free(&a);
    d.sequential = 0;

    /* too little data */
    CHECK(trn_loader_init(&a, tok, 40, &d) == TRN_ERR_INVALID, "validation split shorter than a batch\n");
    CHECK(strstr(trn_error_reason(), "validation") != NULL, "reason: %s\n", trn_error_reason());
    d.no_val = 1;
    CHECK(trn_loader_init(&a, tok, B_ * T_, &d) == TRN_ERR_INVALID, "B*T tokens are one too few\n");
    CHECK(strstr(trn_error_reason(), "B*T+1") != NULL, "reason: %s\n", trn_error_reason());
    CHECK(trn_loader_init(&a, tok, B_ * T_ + 1, &d) == TRN_OK && a.batches_per_epoch == 1 && a.val_batches == 0,
          "B*T+1 tokens make one batch\n");
    trn_loader_next(&a, x, y);
    trn_loader_next(&a, x2, y2);
    for (i = 0, k = 0; i < B_ * T_; i++) k += x[i] - x2[i]; /* same windows, maybe reordered */
    CHECK(k == 0 && a.pos.epoch == 1, "one-batch epochs repeat their windows\n");
    trn_loader_free(&a);
    d.no_val = 0;
    d.val_fraction = 1.5f;
    CHECK(trn_loader_init(&a, tok, N, &d) == TRN_ERR_INVALID, "validation fraction >= 1\n");
    d.val_fraction = 0.5f;
    CHECK(trn_loader_init(&a, tok, N, &d) == TRN_OK && a.n_val == 500, "validation fraction 0.5\n");
    trn_loader_free(&a);
    d.val_fraction = 0; d.T = 0;
    CHECK(trn_loader_init(&a, tok, N, &d) == TRN_ERR_INVALID, "T = 0\n");
}

int main(void) {
    int i;
    const char *files[] = {"vocab.json", "merges.txt", "merges2.txt", "bad_vocab.json", "bad_merges.txt", "cut.json", "bom.json",
                           "s.bin", "magic.bin", "version.bin", "trunc.bin", "long.bin", "short.bin", "neg.bin",
                           "a.txt", "b.txt", "empty.txt", "shard.txt", "fake.bin", "zero.bin",
                           "s32.bin", "s16.bin", "w32.bin", "t32.bin", "l32.bin", "h32.bin", "v32.bin", "v16.bin",
                           "n32.bin", "s32.txt"};
    strcpy(g_dir, "/tmp/test_data_XXXXXX");
    if (!mkdtemp(g_dir)) { perror("mkdtemp"); return 1; }
    make_alphabet();
    test_pretokenizer();
    test_bytes_tokenizer();
    test_bpe();
    test_bpe_errors();
    test_shards();
    test_shards32();
    test_tokens_load();
    test_tokens_check();
    test_loader();
    CHECK(trn_ledger_current(TRN_HOST, TRN_KIND_RUNTIME) == 0 && trn_ledger_current(TRN_HOST, TRN_KIND_TEMP) == 0,
          "everything freed: runtime %zu temp %zu bytes left\n", trn_ledger_current(TRN_HOST, TRN_KIND_RUNTIME),
          trn_ledger_current(TRN_HOST, TRN_KIND_TEMP));
    for (i = 0; i < (int)(sizeof files / sizeof files[0]); i++) remove(tmp_path(files[i]));
    rmdir(g_dir);
    return check_summary();
}
