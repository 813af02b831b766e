/* tests/hf_tokenizer_check.c - the kit's side of tests/test_hf_tokenizer.sh.

      hf_tokenizer_check DIR NAME... [!NAME=WORDS ...]

   DIR holds what tests/hf_tokenizer_ref.py wrote with the `tokenizers`
   package: docs.bin (held-out documents) and, per NAME, NAME.json (the
   tokenizer), NAME.ids (the package's ids per document) and NAME.dec (the
   package's decode of them). For each NAME this loads NAME.json with
   trn_tokenizer_load_hf, encodes every document with the same options
   the package used (document i: TRN_ENCODE_BOS when i % 10 == 0,
   TRN_ENCODE_NO_SPECIAL when i % 10 == 1) and requires
   - the ids identical to the package's, document by document;
   - the kit's decode of them identical to the package's decode;
   - for byte-level files, decode(encode(doc)) == doc byte for byte
     (documents without the BOS; not with add_prefix_space or NFC).
   "!NAME=WORDS": DIR/NAME.json must be refused by the loader with one
   line that contains WORDS, and leave the tokenizer empty.
   "@nfc": the NFC normalizer alone (trn__nfc, trn__nfc_text) on every
   case of DIR/nfc.bin (every assigned code point with marks around it, and
   Hangul jamo; Python's unicodedata.normalize('NFC', ...) beside each):
   both outputs must be Python's, and trn__nfc_text may say "already NFC"
   only where it is; plus bytes that are not UTF-8, which pass through.
   "@classes": the kit's character class (trn__char_class: other, \s,
   \p{L}, \p{N}) of every assigned code point must be the one the
   package's regex engine gives it (DIR/classes.bin).
   "@pieces": the kit's pre-tokenizer scanners (trn_bpe_pretoken_len for
   GPT-2's regex, trn__l3_pretoken_len for Llama 3's and Qwen2's) must cut
   each string of DIR/pieces.bin (edge cases and random strings of white
   space, marks, contractions...) into the package's pieces, whatever the
   vocabulary (the ids of a document can hide a wrong cut when no merge
   crosses it).
   Prints one line per tokenizer (documents, bytes, ids, the first
   difference if any) and "N passed, M failed". */
#define TRAIN_IMPLEMENTATION
#include "train.h"
#include "extras/train_data.h"

#include <stdlib.h>

static int n_pass, n_fail;

static unsigned char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    unsigned char *p;
    long sz;
    if (!f || fseek(f, 0, SEEK_END) != 0 || (sz = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
        fprintf(stderr, "hf_tokenizer_check: cannot read %s\n", path);
        exit(2);
    }
    p = (unsigned char *)malloc((size_t)sz + 1);
    if (!p || fread(p, 1, (size_t)sz, f) != (size_t)sz) { fprintf(stderr, "hf_tokenizer_check: read %s\n", path); exit(2); }
    fclose(f);
    *n = (size_t)sz;
    return p;
}

static int32_t rd32(const unsigned char **p) {
    int32_t v;
    memcpy(&v, *p, 4);
    *p += 4;
    return v;
}

static void check(const char *dir, const char *name, const unsigned char *docs) {
    char path[4096];
    size_t n_ids_file, n_dec_file, total_bytes = 0, total_ids = 0;
    unsigned char *ids_file, *dec_file;
    const unsigned char *d = docs, *pi, *pd;
    trn_tokenizer tok;
    trn_tokens ids = {0};
    trn_result r;
    int n_docs, i, prefix = 0, bad_ids = 0, bad_dec = 0, bad_round = 0, first_bad = -1;
    char *buf = NULL;
    size_t buf_cap = 0;
    snprintf(path, sizeof path, "%s/%s.json", dir, name);
    if ((r = trn_tokenizer_load_hf(&tok, path)) != TRN_OK) {
        printf("FAIL %s: load: %s\n", name, trn_error_reason());
        n_fail++;
        return;
    }
    snprintf(path, sizeof path, "%s/%s.ids", dir, name);
    pi = ids_file = slurp(path, &n_ids_file);
    snprintf(path, sizeof path, "%s/%s.dec", dir, name);
    pd = dec_file = slurp(path, &n_dec_file);
    n_docs = rd32(&d);
    for (i = 0; i < tok.n_stages; i++) prefix |= tok.stage[i] == 1; /* add_prefix_space: no exact round trip */
    prefix |= tok.nfc; /* NFC changes the text: no exact round trip either */
    for (i = 0; i < n_docs; i++) {
        int32_t len = rd32(&d), n_ref = rd32(&pi), dec_len;
        const char *text = (const char *)d;
        int flags = i % 10 == 0 ? TRN_ENCODE_BOS : i % 10 == 1 ? TRN_ENCODE_NO_SPECIAL : 0;
        size_t got;
        d += len;
        total_bytes += (size_t)len;
        ids.n = 0;
        if ((r = trn_tokenizer_encode_ex(&tok, text, (size_t)len, flags, &ids)) != TRN_OK) {
            printf("FAIL %s: encode doc %d: %s\n", name, i, trn_error_reason());
            n_fail++;
            break;
        }
        total_ids += ids.n;
        if ((int32_t)ids.n != n_ref || memcmp(ids.ids, pi, 4 * (size_t)n_ref) != 0) {
            size_t k = 0;
            while (k < ids.n && (int32_t)k < n_ref && memcmp(&ids.ids[k], pi + 4 * k, 4) == 0) k++;
            if (bad_ids++ == 0) {
                int32_t want = (int32_t)k < n_ref ? ((const int32_t *)(const void *)pi)[0] : -1;
                size_t at = 0, j;
                memcpy(&want, pi + 4 * ((int32_t)k < n_ref ? k : 0), 4);
                for (j = 0; j < k; j++) { size_t l; trn_tokenizer_token(&tok, ids.ids[j], &l); at += l; }
                printf("  %s doc %d: %zu ids vs the package's %d, first difference at id %zu: kit %d, package %d "
                       "(near byte %zu: \"%.40s\")\n", name, i, ids.n, n_ref, k, k < ids.n ? ids.ids[k] : -1,
                       (int32_t)k < n_ref ? want : -1, at, text + (at < (size_t)len ? at : 0));
                first_bad = i;
            }
        }
        pi += 4 * (size_t)n_ref;
        dec_len = rd32(&pd);
        got = trn_tokenizer_decode(&tok, (const int *)(const void *)(pi - 4 * (size_t)n_ref), (size_t)n_ref, NULL, 0);
        if (got + 1 > buf_cap) { buf_cap = 2 * (got + 1); free(buf); buf = (char *)malloc(buf_cap); }
        trn_tokenizer_decode(&tok, (const int *)(const void *)(pi - 4 * (size_t)n_ref), (size_t)n_ref, buf, buf_cap);
        if ((int32_t)got != dec_len || memcmp(buf, pd, (size_t)dec_len) != 0) {
            if (bad_dec++ == 0) printf("  %s doc %d: decode differs from the package's (%zu vs %d bytes)\n", name, i, got, dec_len);
        }
        pd += dec_len;
        if (tok.byte_level && !prefix && flags != TRN_ENCODE_BOS && (got != (size_t)len || memcmp(buf, text, (size_t)len) != 0))
            if (bad_round++ == 0) printf("  %s doc %d: decode(encode(text)) is not the text\n", name, i);
    }
    if (bad_ids || bad_dec || bad_round) {
        printf("FAIL %s: %d of %d documents with other ids (first: doc %d), %d decodes differ, %d round trips "
               "differ\n", name, bad_ids, n_docs, first_bad, bad_dec, bad_round);
        n_fail++;
    } else {
        printf("ok %s: %d documents, %zu bytes, %zu ids identical to the package's, decode identical%s\n", name,
               n_docs, total_bytes, total_ids, tok.byte_level && !prefix ? ", round trip exact" : "");
        n_pass++;
    }
    free(buf); free(ids_file); free(dec_file);
    trn_tokens_free(&ids);
    trn_tokenizer_free(&tok);
}

/* hf_tokenizer_check's @nfc (see the top) */
static void check_nfc(const char *dir) {
    char path[4096];
    size_t n_file;
    unsigned char *file;
    const unsigned char *p;
    trn__dbuf out = {NULL, 0, 0, TRN_KIND_TEMP}, cps = {NULL, 0, 0, TRN_KIND_TEMP}, tmp = {NULL, 0, 0, TRN_KIND_TEMP};
    trn__dbuf q = {NULL, 0, 0, TRN_KIND_TEMP};
    int n, i, bad = 0, bad_quick = 0, quick = 0, changed = 0;
    static const char *raw[][2] = { /* not UTF-8 (in, NFC) */
        {"\xFF" "e\xCC\x81", "\xFF\xC3\xA9"}, {"e\xFF\xCC\x81", "e\xFF\xCC\x81"}, {"\xCC", "\xCC"},
        {"\xE1\x84", "\xE1\x84"}, {"\xED\xA0\x80\xCC\x81", "\xED\xA0\x80\xCC\x81"}};
    snprintf(path, sizeof path, "%s/nfc.bin", dir);
    p = file = slurp(path, &n_file);
    n = rd32(&p);
    for (i = 0; i < n + 5; i++) {
        const char *in, *want;
        int32_t n_in, n_want;
        if (i < n) {
            n_in = rd32(&p); in = (const char *)p; p += n_in;
            n_want = rd32(&p); want = (const char *)p; p += n_want;
        } else {
            in = raw[i - n][0]; want = raw[i - n][1];
            n_in = (int32_t)strlen(in); n_want = (int32_t)strlen(want);
        }
        int ch;
        changed += n_in != n_want || memcmp(in, want, (size_t)n_in) != 0;
        if (trn__nfc_text(&q, &cps, &tmp, (const unsigned char *)in, (size_t)n_in, &ch) != TRN_OK) { printf("  nfc: %s\n", trn_error_reason()); bad++; continue; }
        if (!ch) {
            quick++;
            if (n_in != n_want || memcmp(in, want, (size_t)n_in) != 0)
                if (bad_quick++ < 3) printf("  nfc case %d: the quick check says NFC, it is not\n", i);
        } else if ((int32_t)q.n != n_want || memcmp(q.p, want, (size_t)n_want) != 0) {
            if (bad_quick++ < 3) printf("  nfc case %d: trn__nfc_text differs from Python\n", i);
        }
        if (trn__nfc(&out, &cps, (const unsigned char *)in, (size_t)n_in) != TRN_OK) { printf("  nfc: %s\n", trn_error_reason()); bad++; continue; }
        if ((int32_t)out.n != n_want || memcmp(out.p, want, (size_t)n_want) != 0) {
            if (bad++ < 5) {
                int k;
                printf("  nfc case %d:", i);
                for (k = 0; k < n_in; k++) printf(" %02X", (unsigned char)in[k]);
                printf(" -> kit");
                for (k = 0; k < (int)out.n; k++) printf(" %02X", (unsigned char)out.p[k]);
                printf(", Python");
                for (k = 0; k < n_want; k++) printf(" %02X", (unsigned char)want[k]);
                printf("\n");
            }
        }
    }
    if (bad || bad_quick) {
        printf("FAIL nfc: %d of %d cases differ from unicodedata's NFC (trn__nfc), %d (trn__nfc_text)\n", bad, n + 5, bad_quick);
        n_fail++;
    } else {
        printf("ok nfc: %d cases (%d changed by NFC) identical to Python's unicodedata (Unicode %s), the quick "
               "check right (%d said NFC)\n", n + 5, changed, TRN__UNICODE_VERSION, quick);
        n_pass++;
    }
    trn_free(out.p); trn_free(cps.p); trn_free(tmp.p); trn_free(q.p); free(file);
}

/* hf_tokenizer_check's @classes (see the top) */
static void check_classes(const char *dir) {
    static const char *names[] = {"other", "\\s", "\\p{L}", "\\p{N}"};
    char path[4096];
    size_t n_file;
    unsigned char *want;
    uint32_t cp;
    int bad = 0, n = 0;
    snprintf(path, sizeof path, "%s/classes.bin", dir);
    want = slurp(path, &n_file);
    if (n_file != 0x110000) { printf("FAIL classes: %s is %zu bytes, not 0x110000\n", path, n_file); n_fail++; free(want); return; }
    for (cp = 0; cp < 0x110000; cp++) {
        int got;
        if (want[cp] == 255) continue; /* a surrogate, or unassigned in Python's Unicode */
        n++;
        if ((got = trn__char_class(cp)) != want[cp] && bad++ < 5)
            printf("  U+%04X: kit %s, package %s\n", (unsigned)cp, names[got & 3], names[want[cp] & 3]);
    }
    if (bad) {
        printf("FAIL classes: %d of %d assigned code points in another class than the package's regex gives\n", bad, n);
        n_fail++;
    } else {
        printf("ok classes: %d assigned code points, each in the package's class (other, \\s, \\p{L}, \\p{N})\n", n);
        n_pass++;
    }
    free(want);
}

/* hf_tokenizer_check's @pieces (see the top) */
static void check_pieces(const char *dir) {
    static const char *names[] = {"GPT-2", "Llama 3", "Qwen2"};
    char path[4096];
    size_t n_file;
    unsigned char *file;
    const unsigned char *p;
    int n, i, m, bad[3] = {0, 0, 0}, n_pieces = 0;
    snprintf(path, sizeof path, "%s/pieces.bin", dir);
    p = file = slurp(path, &n_file);
    n = rd32(&p);
    for (i = 0; i < n; i++) {
        int32_t len = rd32(&p);
        const unsigned char *s = p;
        p += len;
        for (m = 0; m < 3; m++) {
            int32_t k = rd32(&p), j, same = 1;
            size_t pos = 0, got = 0;
            for (j = 0; j < k; j++, pos += got) {
                int32_t want = rd32(&p);
                if (!same) continue;
                got = m == 0 ? trn_bpe_pretoken_len((const char *)s + pos, (size_t)len - pos)
                             : trn__l3_pretoken_len(s + pos, (size_t)len - pos, m == 1 ? 3 : 1);
                if (got != (size_t)want) {
                    same = 0;
                    if (bad[m] == 0 && bad[0] + bad[1] + bad[2] < 3)
                        printf("  %s, string %d: piece %d at byte %zu is %zu bytes, the package's %d (\"%.*s\")\n",
                               names[m], i, j, pos, got, want, (int)(len - (int32_t)pos < 24 ? len - (int32_t)pos : 24),
                               (const char *)s + pos);
                }
            }
            n_pieces += k;
            bad[m] += !same;
        }
    }
    if (bad[0] || bad[1] || bad[2]) {
        printf("FAIL pieces: of %d strings, %d cut otherwise than the package (GPT-2's regex), %d (Llama 3's), %d "
               "(Qwen2's)\n", n, bad[0], bad[1], bad[2]);
        n_fail++;
    } else {
        printf("ok pieces: %d strings cut into the package's %d pieces by GPT-2's, Llama 3's and Qwen2's regexes\n",
               n, n_pieces);
        n_pass++;
    }
    free(file);
}

int main(int argc, char **argv) {
    char path[4096];
    size_t n;
    unsigned char *docs;
    int i;
    if (argc < 3) { fprintf(stderr, "usage: hf_tokenizer_check DIR NAME...\n"); return 2; }
    snprintf(path, sizeof path, "%s/docs.bin", argv[1]);
    docs = slurp(path, &n);
    for (i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "@nfc")) { check_nfc(argv[1]); continue; }
        if (!strcmp(argv[i], "@classes")) { check_classes(argv[1]); continue; }
        if (!strcmp(argv[i], "@pieces")) { check_pieces(argv[1]); continue; }
        if (argv[i][0] == '!' && strchr(argv[i], '=')) { /* a file to refuse */
            const char *eq = strchr(argv[i], '=');
            trn_tokenizer tok;
            snprintf(path, sizeof path, "%s/%.*s.json", argv[1], (int)(eq - argv[i] - 1), argv[i] + 1);
            if (trn_tokenizer_load_hf(&tok, path) == TRN_OK) {
                printf("FAIL %s: loaded, should be refused\n", path);
                n_fail++;
                trn_tokenizer_free(&tok);
            } else if (!strstr(trn_error_reason(), eq + 1) || strchr(trn_error_reason(), '\n') || tok.merges || tok.bytes) {
                printf("FAIL %s: refused, but the reason \"%s\" does not say \"%s\" on one line\n", path,
                       trn_error_reason(), eq + 1);
                n_fail++;
            } else {
                printf("ok %s refused: %s\n", path, trn_error_reason());
                n_pass++;
            }
            continue;
        }
        check(argv[1], argv[i], docs);
    }
    free(docs);
    printf("%d passed, %d failed\n", n_pass, n_fail);
    return n_fail != 0;
}
