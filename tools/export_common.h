/* tools/export_common.h - what the exporters (export_hf.c, export_gguf.c)
   share: one-line errors and typed reads of a checkpoint's metadata (the
   gpt2.* / llama.* keys examples/gpt2 and examples/llama write), and the
   run's tokenizer.json: found, loaded with the kit's own reader
   (extras/train_data.h), each token's text as the file stores it. Define
   EXPORT_PROG (the program's name, for messages) before including it,
   after train.h and extras/train_data.h. */
#ifndef EXPORT_COMMON_H
#define EXPORT_COMMON_H
#ifndef EXPORT_PROG
#error "define EXPORT_PROG (the program's name) before including tools/export_common.h"
#endif

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>

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

/* ---- the run's tokenizer.json ------------------------------------------------
   Which file: --tokenizer FILE when given, else the path the training run
   saved in the checkpoint's metadata (run.tokenizer: examples/common.h
   writes it into each ckpt_*.safetensors) when that file is still there;
   for a model.safetensors (which keeps only the model's keys) the newest
   ckpt_*.safetensors beside it says it; else a tokenizer.json beside the
   file (a Hugging Face directory). A directory means its tokenizer.json.
   NULL when there is none, with the line that says why in tokenizer_note
   (the tool prints it after its own line). The file is loaded with
   trn_tokenizer_load_hf (the same checks as training: a file the kit
   cannot read is refused here too). */
static char tokenizer_note[1400];
static const char *run_tokenizer(trn_tokenizer *tok, const trn_safetensors *f, const char *given) {
    static char path[1300];
    char found[1300] = "";
    const char *p = given;
    struct stat st;
    if (!p) p = trn_safetensors_meta(f, "run.tokenizer");
    if (!p) { /* model.safetensors: the run's newest checkpoint beside it */
        char dir[1024], best[256] = "", ck[1300];
        const char *slash = strrchr(f->path, '/');
        DIR *d;
        struct dirent *e;
        snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - f->path) : 1, slash ? f->path : ".");
        if ((d = opendir(dir)) != NULL) {
            while ((e = readdir(d)) != NULL) /* ckpt_%08d: the name's order is the step's */
                if (!strncmp(e->d_name, "ckpt_", 5) && strstr(e->d_name, ".safetensors") && strcmp(e->d_name, best) > 0)
                    snprintf(best, sizeof best, "%.255s", e->d_name);
            closedir(d);
        }
        snprintf(ck, sizeof ck, "%s/%s", dir, best);
        if (*best) {
            trn_safetensors c;
            if (trn_safetensors_open(&c, ck) == TRN_OK) {
                const char *q = trn_safetensors_meta(&c, "run.tokenizer");
                if (q && *q) snprintf(found, sizeof found, "%.1200s", q), p = found;
                trn_safetensors_close(&c);
            }
        }
        if (!p) {
            snprintf(found, sizeof found, "%s/tokenizer.json", dir);
            if (stat(found, &st) == 0) p = found;
        }
    }
    if (!given) {
        if (!p || !*p) {
            snprintf(tokenizer_note, sizeof tokenizer_note,
                     "note: no --tokenizer FILE, and %.1000s names none (run.tokenizer): no tokenizer written", f->path);
            return NULL;
        }
        if (stat(p, &st) != 0) {
            snprintf(tokenizer_note, sizeof tokenizer_note,
                     "note: the run's tokenizer %.1000s is not there (give --tokenizer FILE): no tokenizer written", p);
            return NULL;
        }
    }
    if (stat(p, &st) == 0 && S_ISDIR(st.st_mode)) snprintf(path, sizeof path, "%.1200s/tokenizer.json", p);
    else snprintf(path, sizeof path, "%.1200s", p);
    if (trn_tokenizer_load_hf(tok, path) != TRN_OK) die("%s%s", trn_error_reason(), "");
    return path;
}

/* The GPT-2 byte alphabet (a byte-level vocabulary stores each byte as one
   printable character): the 188 visible Latin-1 bytes ('!'..'~', 0xA1..0xAC,
   0xAE..0xFF) stand for themselves, the other 68 are U+0100 + their rank
   among those 68. Returns the code point of byte b. */
static int byte_char(int b) {
    int vis = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE), rank = 0, c;
    if (vis) return b;
    for (c = 0; c < b; c++) rank += !((c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE));
    return 256 + rank;
}
/* the added token with this id, or NULL */
static const trn_added_token *added_of(const trn_tokenizer *tok, int id) {
    for (int i = 0; i < tok->n_added; i++)
        if (tok->added[i].id == id) return &tok->added[i];
    return NULL;
}
/* Token `id` as tokenizer.json writes it, into buf (4 KB: NUL-terminated; its
   length returned): an added token's content; a vocabulary token of a
   byte-level file in the byte alphabet above ("Ġthe"), of a metaspace file
   as it is ("▁the", "<0x0A>"); -1 for an id no token has. The kit keeps a
   byte-level token as its bytes: mapping them back is exact because the
   file's strings are in that alphabet (an added token is kept as written). */
static long token_text(const trn_tokenizer *tok, int id, char *buf, size_t cap) {
    const trn_added_token *at = added_of(tok, id);
    const char *s;
    size_t n = 0, len;
    if (at) {
        if ((size_t)at->len >= cap) die("a token of %s: too long%s", "more than 4 KB", "");
        memcpy(buf, tok->added_text + at->off, at->len);
        buf[at->len] = 0;
        return (long)at->len;
    }
    if (id < 0 || id >= tok->vocab_size || tok->len[id] == UINT32_MAX) return -1;
    s = tok->bytes + tok->off[id];
    len = tok->len[id];
    for (size_t i = 0; i < len; i++) {
        int cp = tok->byte_level ? byte_char((unsigned char)s[i]) : (unsigned char)s[i];
        if (n + 3 > cap) die("a token of %s: too long%s", "more than 4 KB", "");
        if (cp < 0x80 || !tok->byte_level) buf[n++] = (char)cp;
        else buf[n++] = (char)(0xC0 | (cp >> 6)), buf[n++] = (char)(0x80 | (cp & 0x3F));
    }
    buf[n] = 0;
    return (long)n;
}
/* The end-of-text id: the post-processor's EOS (TemplateProcessing "$A
   </s>"), else a special added token under the name Llama 2 ("</s>"),
   Llama 3 ("<|end_of_text|>") or GPT-2 ("<|endoftext|>") gives it; -1 if
   none. (tokenizer.json has no field that says "this is the EOS": the
   transformers config does; these names are the convention.) */
static int eos_of(const trn_tokenizer *tok) {
    static const char *names[] = {"</s>", "<|end_of_text|>", "<|endoftext|>"};
    if (tok->eos_id >= 0) return tok->eos_id;
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < tok->n_added; i++) {
            const trn_added_token *at = &tok->added[i];
            if (at->special && at->len == strlen(names[k]) && !memcmp(tok->added_text + at->off, names[k], at->len))
                return at->id;
        }
    return -1;
}
#endif
