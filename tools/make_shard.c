/* tools/make_shard.c - text files -> an llm.c token shard, and back.

   A token shard is what llm.c's data scripts write and what examples/gpt2
   reads with --data FILE.bin: a 1024-byte header (magic 20240520,
   version 1, token count) and then the tokens as uint16.

      ./tools/make_shard -o data.bin input.txt                  # byte-level
      ./tools/make_shard --bpe-dir gpt2/ --eot -o data.bin a.txt b.txt
      ./tools/make_shard --bpe-dir gpt2/ --decode data.bin | head
      ./tools/make_shard --tokenizer llama/tokenizer.json --bos -o data.bin *.txt

   --bpe-dir takes a directory with GPT-2's vocab.json and merges.txt (the
   Hugging Face files); --tokenizer a Hugging Face tokenizer.json (BPE:
   GPT-2, Llama 2/3, Mistral, SmolLM style; see extras/train_data.h);
   without either every byte is a token (vocab 256). */
#define TRAIN_IMPLEMENTATION
#include "train.h"
#include "extras/train_data.h"

#include <stdlib.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: make_shard [--bpe-dir DIR | --tokenizer FILE] [--eot] [--bos] -o OUT.bin INPUT.txt [INPUT.txt ...]\n"
            "       make_shard [--bpe-dir DIR | --tokenizer FILE] --decode SHARD.bin\n"
            "Tokenizes text files into one llm.c token shard (uint16 tokens, magic 20240520).\n"
            "  -o, --out FILE    the shard to write (written atomically)\n"
            "  --bpe-dir DIR     GPT-2 BPE from DIR/vocab.json and DIR/merges.txt\n"
            "                    (default: byte-level, one token per byte, vocab 256)\n"
            "  --tokenizer FILE  a Hugging Face tokenizer.json (BPE), or a directory with one;\n"
            "                    added/special tokens written in the text are matched\n"
            "  --bos             put the tokenizer's BOS before each input (and its EOS\n"
            "                    after), as tokenizer(text) does in Python (--tokenizer)\n"
            "  --eot             put <|endoftext|> before each input (llm.c's document\n"
            "                    separator; needs a vocabulary that has it)\n"
            "  --decode FILE     print the text of a shard instead (same tokenizer flags)\n"
            "  -h, --help        this text\n");
}

static int fail(const char *what, trn_result r) {
    fprintf(stderr, "make_shard: %s: %s (%s)\n", what, trn_error_reason(), trn_result_string(r));
    return 2;
}

int main(int argc, char **argv) {
    const char *out = NULL, *bpe_dir = NULL, *decode = NULL, *tok_file = NULL;
    const char **inputs = NULL;
    int n_inputs = 0, eot = 0, bos = 0, i, code = 0;
    size_t n_bytes = 0;
    trn_tokenizer tok;
    trn_tokens ids = {0};
    trn_result r;

    inputs = (const char **)calloc((size_t)argc, sizeof *inputs);
    if (!inputs) { fprintf(stderr, "make_shard: out of memory\n"); return 2; }
    for (i = 1; i < argc; i++) {
        const char *a = argv[i];
        int has_value = i + 1 < argc;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); free(inputs); return 0; }
        else if ((!strcmp(a, "-o") || !strcmp(a, "--out")) && has_value) out = argv[++i];
        else if (!strcmp(a, "--bpe-dir") && has_value) bpe_dir = argv[++i];
        else if (!strcmp(a, "--decode") && has_value) decode = argv[++i];
        else if (!strcmp(a, "--tokenizer") && has_value) tok_file = argv[++i];
        else if (!strcmp(a, "--eot")) eot = 1;
        else if (!strcmp(a, "--bos")) bos = 1;
        else if (a[0] == '-' && a[1] != 0) {
            fprintf(stderr, "make_shard: unknown flag or missing value: %s (see --help)\n", a);
            free(inputs);
            return 2;
        } else inputs[n_inputs++] = a;
    }
    if (bpe_dir && tok_file) {
        fprintf(stderr, "make_shard: --bpe-dir and --tokenizer: give one tokenizer\n");
        free(inputs);
        return 2;
    }
    if (decode ? (out || n_inputs || eot || bos) : (!out || n_inputs == 0)) {
        fprintf(stderr, decode ? "make_shard: --decode takes one shard and no other inputs (see --help)\n"
                               : "make_shard: need -o OUT.bin and at least one input file (see --help)\n");
        free(inputs);
        return 2;
    }

    if (bpe_dir || tok_file) {
        r = bpe_dir ? trn_tokenizer_load_bpe_dir(&tok, bpe_dir) : trn_tokenizer_load(&tok, tok_file);
        if (r != TRN_OK) { free(inputs); return fail("tokenizer", r); }
    } else {
        trn_tokenizer_init_bytes(&tok);
    }
    if (eot && tok.eot_id < 0) {
        fprintf(stderr, "make_shard: --eot: this vocabulary has no <|endoftext|> token%s\n",
                bpe_dir || tok_file ? "" : " (byte-level has none; use --bpe-dir)");
        code = 2;
        goto done;
    }
    if (bos && tok.kind == TRN_TOKENIZER_HF ? tok.bos_id < 0 && tok.eos_id < 0 : bos) {
        fprintf(stderr, "make_shard: --bos: this tokenizer has no BOS (only a tokenizer.json's post_processor "
                "gives one)\n");
        code = 2;
        goto done;
    }

    if (decode) { /* shard -> text on stdout */
        size_t k;
        if ((r = trn_token_shard_read(&ids, decode)) != TRN_OK) { code = fail("read", r); goto done; }
        if ((r = trn_tokens_check(ids.ids, ids.n, tok.vocab_size)) != TRN_OK) {
            code = fail(decode, r);
            goto done;
        }
        if (tok.kind == TRN_TOKENIZER_HF) { /* the decoder's rules (a leading space stripped, ...) */
            size_t n = trn_tokenizer_decode(&tok, ids.ids, ids.n, NULL, 0);
            char *buf = (char *)malloc(n + 1);
            if (!buf) { fprintf(stderr, "make_shard: out of memory\n"); code = 2; goto done; }
            trn_tokenizer_decode(&tok, ids.ids, ids.n, buf, n + 1);
            fwrite(buf, 1, n, stdout);
            free(buf);
            goto done;
        }
        for (k = 0; k < ids.n; k++) {
            size_t len;
            const char *s = trn_tokenizer_token(&tok, ids.ids[k], &len);
            if (s) fwrite(s, 1, len, stdout);
        }
        goto done;
    }

    for (i = 0; i < n_inputs; i++) {
        char *text;
        size_t len;
        if ((r = trn_text_read_files(&text, &len, &inputs[i], 1, 0)) != TRN_OK) { code = fail("read", r); goto done; }
        n_bytes += len;
        if (eot) r = trn_tokens_append(&ids, &tok.eot_id, 1);
        if (r == TRN_OK) r = trn_tokenizer_encode_ex(&tok, text, len, bos ? TRN_ENCODE_BOS : 0, &ids);
        trn_free(text);
        if (r != TRN_OK) { code = fail(inputs[i], r); goto done; }
    }
    if (ids.n == 0) {
        fprintf(stderr, "make_shard: the input%s empty: no tokens to write\n", n_inputs > 1 ? "s are" : " is");
        code = 2;
        goto done;
    }
    if ((r = trn_token_shard_write(out, ids.ids, ids.n)) != TRN_OK) { code = fail("write", r); goto done; }
    printf("make_shard: %d file%s, %zu bytes -> %zu tokens (%.2f bytes/token, %s vocab %d) -> %s\n", n_inputs,
           n_inputs > 1 ? "s" : "", n_bytes, ids.n, (double)n_bytes / (double)ids.n,
           tok_file ? "tokenizer.json" : bpe_dir ? "GPT-2 BPE" : "byte-level", tok.vocab_size, out);
done:
    trn_tokens_free(&ids);
    trn_tokenizer_free(&tok);
    free(inputs);
    return code;
}
