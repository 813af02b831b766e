/* extras/train_data.h - a companion of train.h: tokenizers, token shards, text files and the batch loader

   Do this:
      #define TRAIN_IMPLEMENTATION
      #include "train.h"
      #include "extras/train_data.h"
   in the one C or C++ file that implements train.h; every other file
   includes both plainly. This header's implementation comes with train.h's
   (it uses train.h's private helpers: the JSON reader, UTF-8, the ledger),
   so it needs no macro of its own; TRAIN_DATA_IMPLEMENTATION is accepted
   and must sit in the same file as TRAIN_IMPLEMENTATION. It includes
   extras/train_json.h itself (tokenizer.json is read with its typed calls).

   Nothing in train.h, train_cuda.h or train_nccl.h calls this file: it is
   a leaf, used by the examples and by your program if you want it. Why a
   companion and not a part of train.h: docs/DESIGN-notes.md.

   Contents (grep for the anchors):
      >>data        token arrays, llm.c token shards, text files, the
                    byte and GPT-2 BPE tokenizers (with GPT-2's Unicode
                    character classes), Hugging Face's tokenizer.json
                    (BPE: byte-level and byte-fallback/metaspace), the
                    batch loader

   License: MIT, as train.h.
*/
#ifndef TRAIN_H_INCLUDED
#error "extras/train_data.h: include train.h first"
#endif
#include "train_json.h" /* trn_json_*: tokenizer.json (implemented with it, in the same file) */
#ifndef TRAIN_DATA_H_INCLUDED
#define TRAIN_DATA_H_INCLUDED

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------
   >>data declarations
   Text becomes token ids through a tokenizer; ids live in memory as an int
   array (trn_tokens) and on disk as llm.c token shards; a loader cuts them
   into batches of inputs x (B,T) and targets y (B,T), y = x shifted by one
   token, so y[b][t] is the token that follows x[b][t].

      trn_tokenizer tok;  trn_tokens data = {0};  trn_loader loader;
      int x[4*64], y[4*64];
      trn_tokenizer_init_bytes(&tok);                  // or _load_bpe_dir(&tok, dir),
                                                       // _load_hf(&tok, "tokenizer.json")
      trn_tokens_load(&data, "input.txt", &tok);       // text, or a .bin shard
      trn_tokens_check(data.ids, data.n, tok.vocab_size);
      trn_loader_desc ld = {0}; ld.B = 4; ld.T = 64; ld.seed = 1337;
      trn_loader_init(&loader, data.ids, data.n, &ld); // last 10% validate
      trn_loader_next(&loader, x, y);                  // a training batch
      trn_loader_val_batch(&loader, 0, x, y);          // validation batch 0
      trn_loader_pos pos = trn_loader_tell(&loader);   // into the checkpoint,
      trn_loader_seek(&loader, &pos);                  //   and back on resume
      ... trn_loader_free(&loader); trn_tokens_free(&data); trn_tokenizer_free(&tok);

   (Calls that return trn_result must be checked; left out above.)
   Memory: tokenizer tables, token arrays and the loader's order are
   counted as RUNTIME; the text of trn_text_read_files and the encoder's
   scratch (freed before encode returns) as TEMP.
   ------------------------------------------------------------------------ */

/* a growable array of token ids; {0} is an empty one */
typedef struct trn_tokens {
    int *ids;                  /* ids[0 .. n-1] (RUNTIME memory)            */
    size_t n, cap;
} trn_tokens;

TRNDEF trn_result trn_tokens_append(trn_tokens *t, const int *ids, size_t n);
TRNDEF void trn_tokens_free(trn_tokens *t);            /* back to {0}       */
/* every id in [0, vocab_size)? If not: TRN_ERR_MISMATCH naming the first
   bad id and its position ("token 300 at position 17 is >= vocab 256") */
TRNDEF trn_result trn_tokens_check(const int *ids, size_t n, int vocab_size);

/* ---- tokenizers -------------------------------------------------------
   Three kinds sit behind one struct: encode bytes -> ids, decode ids ->
   bytes: bytes, GPT-2's vocab.json + merges.txt, and a Hugging Face
   tokenizer.json (trn_tokenizer_load_hf, below).

   Byte-level: id = byte value, vocab 256, no files, no <|endoftext|>.

   GPT-2 BPE (Radford et al. 2019; files in Hugging Face's layout):
   - vocab.json maps token strings to ids. GPT-2 writes a token's bytes in
     a printable alphabet: the 188 bytes that are visible Latin-1 characters
     ('!'..'~', 0xA1..0xAC, 0xAE..0xFF) stand for themselves, the other 68
     (controls, space, 0x7F..0xA0, 0xAD) become U+0100.. U+0143 in byte
     order; so a space is 'Ġ' (U+0120) and a newline 'Ċ' (U+010A). The
     loader maps keys back to bytes; a character outside that alphabet
     stands for its own UTF-8 bytes (added tokens).
   - merges.txt lists pairs "left right" (same alphabet), one per line,
     best first: line k has rank k. A first line "#version ..." is skipped.
   - Encoding first splits text into pieces the way GPT-2's regex does
     (see trn_bpe_pretoken_len), then in each piece starts from single
     bytes and repeatedly merges the adjacent pair with the lowest rank
     (leftmost first on ties) until no pair has a rank. Pieces never merge
     across their boundaries.
   - "<|endoftext|>" (GPT-2: id 50256) is eot_id when the vocab has it.
     Encoding treats that string in text as plain text; put eot_id into
     the id stream yourself (tools/make_shard --eot does, per document).
   Real GPT-2 files (vocab 50257, 50000 merges) load with the same code;
   they are not in this repository. */
typedef enum trn_tokenizer_kind {
    TRN_TOKENIZER_BYTES = 0,   /* ids are byte values, vocab 256           */
    TRN_TOKENIZER_BPE = 1,     /* GPT-2 byte-level BPE                     */
    TRN_TOKENIZER_HF = 2       /* a BPE tokenizer.json (see below)         */
} trn_tokenizer_kind;

/* one added token of a tokenizer.json (matched in the text before BPE) */
typedef struct trn_added_token {
    uint32_t off, len;         /* its content in added_text                */
    uint32_t poff, plen;       /* the pattern matched: the content, or the
                                  content normalized (normalized = 1)      */
    int id, special, normalized;
} trn_added_token;

typedef struct trn_bpe_merge { /* one slot of the merge hash table         */
    int left, right;           /* the pair of ids (left = -1: empty slot)  */
    int rank;                  /* line in merges.txt: lower merges first   */
    int id;                    /* the id of the merged token               */
} trn_bpe_merge;

typedef struct trn_tokenizer {
    trn_tokenizer_kind kind;
    int vocab_size;            /* ids are 0 .. vocab_size-1 (GPT-2: 50257) */
    int eot_id;                /* id of "<|endoftext|>", -1 when none      */
    int n_merges;
    /* BPE tables (RUNTIME memory; all NULL for bytes) */
    char *bytes;               /* every token's bytes, back to back        */
    uint32_t *off, *len;       /* id -> its bytes bytes[off[id]..]; len[id]
                                  = UINT32_MAX for an id no token uses     */
    int *lookup;               /* hash table: bytes -> id (-1: empty)      */
    size_t lookup_cap;         /* power of two                             */
    trn_bpe_merge *merges;     /* hash table: (left, right) -> rank, id    */
    size_t merges_cap;         /* power of two                             */
    int byte_id[256];          /* the id of each single-byte token         */
    /* tokenizer.json only (kind TRN_TOKENIZER_HF; zero otherwise) */
    int byte_level;            /* token strings use GPT-2's byte alphabet  */
    int n_stages, stage[6];    /* the pre-tokenizer, as TRN__PT_* stages   */
    int meta_norm;             /* normalizer Prepend("▁") + Replace(" ","▁") */
    int nfc;                   /* normalizer NFC (alone or in a Sequence)  */
    int meta_prepend;          /* Metaspace pre-tokenizer: 0 never, 1 always,
                                  2 first (only at offset 0 of the input)  */
    int byte_fallback, ignore_merges, fuse_unk, unk_id;
    int byte_token[256];       /* id of "<0xNN>" (byte fallback), or -1    */
    int strip_space;           /* decoder: 1 drops the output's first byte if
                                  a space (Strip); 2 drops the spaces of the
                                  first token ("▁" in Metaspace's decoder) */
    int bos_id, eos_id;        /* TemplateProcessing's, or -1              */
    int n_added;
    trn_added_token *added;    /* added_tokens (RUNTIME memory)            */
    char *added_text;
    int *added_by_byte;        /* added indices sorted by pattern's 1st byte */
    int added_first[257];      /* bucket b: added_by_byte[first[b]..first[b+1]) */
    char *dec;                 /* what each id decodes to: dec[dec_off[id]..] */
    uint32_t *dec_off, *dec_len;
} trn_tokenizer;

TRNDEF void trn_tokenizer_init_bytes(trn_tokenizer *tok);
/* TRN_ERR_IO (cannot read), TRN_ERR_FORMAT (bad JSON, bad merge line, a
   merge naming a token not in the vocab, a byte without its token,
   duplicate tokens or ids, ids >= 2^24), TRN_ERR_NOMEM. On error *tok is
   left empty (safe to free). */
TRNDEF trn_result trn_tokenizer_load_bpe(trn_tokenizer *tok, const char *vocab_json_path,
                                         const char *merges_txt_path);
/* dir/vocab.json + dir/merges.txt */
TRNDEF trn_result trn_tokenizer_load_bpe_dir(trn_tokenizer *tok, const char *dir);
TRNDEF void trn_tokenizer_free(trn_tokenizer *tok);
/* append the ids of text[0..len) to *out (any bytes, need not be UTF-8 or
   NUL-terminated). Fails only for memory (TRN_ERR_NOMEM). */
TRNDEF trn_result trn_tokenizer_encode(const trn_tokenizer *tok, const char *text, size_t len,
                                       trn_tokens *out);
/* the bytes of one token (not NUL-terminated): *len set; NULL (and *len 0)
   for an id outside the vocab, e.g. the padding ids 50257..50303 of the
   124M model. For printing samples one token at a time. */
TRNDEF const char *trn_tokenizer_token(const trn_tokenizer *tok, int id, size_t *len);
/* decode n ids into buf like snprintf: writes at most cap-1 bytes plus a
   NUL, returns the full length; ids outside the vocab decode to nothing */
TRNDEF size_t trn_tokenizer_decode(const trn_tokenizer *tok, const int *ids, size_t n,
                                   char *buf, size_t cap);
/* the id whose bytes are exactly bytes[0..len), or -1 */
TRNDEF int trn_tokenizer_find(const trn_tokenizer *tok, const char *bytes, size_t len);
/* GPT-2's pre-tokenizer, one piece at a time: the length in bytes (>= 1
   when len >= 1) of the piece that starts at text[0]. GPT-2's pattern is
      's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
   tried in that order at each position; it is written out by hand here:
   contractions (ASCII apostrophe, lowercase, as in GPT-2), then an optional
   ASCII space and a run of letters, of digits, or of other characters,
   then whitespace, where a run followed by a non-space keeps its last
   character for the next piece (so "a  b" -> "a", " ", " b").
   Characters are decoded from UTF-8 and classed as GPT-2's regex does:
   whitespace is Unicode White_Space; letters (L*) and numbers (N*) come
   from Unicode 14 tables, exact for the BMP (U+0000..U+FFFF), coarse
   above it (CJK extensions and historic scripts are letters, emoji and
   other symbols are "other"; 99% of those characters classed right).
   A byte that is not valid UTF-8 counts as one "other" character. */
TRNDEF size_t trn_bpe_pretoken_len(const char *text, size_t len);

/* ---- Hugging Face tokenizer.json (the "fast tokenizer" file) -----------
   trn_tokenizer_load_hf reads the BPE files that Llama 2/3, TinyLlama,
   Mistral, SmolLM, GPT-2 and most causal LMs on the Hub ship. Encoding
   follows the `tokenizers` package step by step:
   1. added_tokens are cut out of the text first, leftmost-longest: those
      with normalized = false in the raw text, then the others in the
      normalized remainder (their pattern is their content normalized).
      A matched added token is its id; the pieces between go on.
   2. normalizer, per piece: none, NFC (Qwen2, Qwen2.5: Unicode's
      canonical composition, "e" + U+0301 -> "é"; Unicode 14 tables in
      extras/train_unicode.h), Prepend("▁") + Replace(" ", "▁") (Llama 2,
      TinyLlama: "a b" -> "▁a▁b"), or a Sequence of NFC and that pair.
   3. pre-tokenizer: ByteLevel (add_prefix_space; use_regex = GPT-2's
      split), Split with one of three known regexes written out by hand
      as scanners (no regex engine): GPT-2's, Llama 3's (cl100k-like:
      letters with one leading non-letter, digits in runs of 1..3,
      case-insensitive contractions, newlines kept with what precedes)
      and Qwen2's (Llama 3's with single digits), Digits
      (individual_digits or runs), Metaspace (replacement "▁",
      prepend_scheme always/first/never, split), or a Sequence of these.
   4. model BPE on each piece: byte-level (the piece's bytes mapped to
      GPT-2's alphabet) or per character; ignore_merges (a piece that is
      a whole token is that token), byte_fallback (a character outside
      the vocabulary becomes its bytes' <0xNN> tokens), unk_token and
      fuse_unk; then merges, lowest rank first as above. merges come as
      "a b" strings or ["a", "b"] pairs.
   Decoding maps ids back to bytes (ByteLevel; or "▁" -> " ", <0xNN> ->
   the byte, and one leading space dropped when the decoder strips it).
   Refused, with one line naming it: models other than BPE (Unigram,
   WordPiece, WordLevel), normalizers other than those above (NFKC, NFD,
   Lowercase, Strip, ...), other pre-tokenizers or split patterns, Split
   behaviours other than Isolated, dropout, subword prefixes/suffixes,
   added tokens with single_word/lstrip/rstrip, post-processors other than
   TemplateProcessing/ByteLevel/Sequence of them.
   The file passes trn_check_regular and the kit's strict JSON reader. */
TRNDEF trn_result trn_tokenizer_load_hf(trn_tokenizer *tok, const char *tokenizer_json_path);
/* path is a tokenizer.json file, or a directory holding tokenizer.json,
   or one holding vocab.json + merges.txt (GPT-2's files) */
TRNDEF trn_result trn_tokenizer_load(trn_tokenizer *tok, const char *path);
/* encode with options (flags OR'ed). trn_tokenizer_encode(...) is flags 0.
   - TRN_ENCODE_BOS: the post-processor's BOS first (and its EOS last),
     as `tokenizer(text)` does in Python (add_special_tokens=True);
   - TRN_ENCODE_NO_SPECIAL: added tokens marked special ("<s>",
     "<|endoftext|>") are plain text, like split_special_tokens=True.
   Without it they are matched in the text, as the package does by
   default. (vocab.json tokenizers: flags ignored, no added tokens.) */
#define TRN_ENCODE_BOS 1
#define TRN_ENCODE_NO_SPECIAL 2
TRNDEF trn_result trn_tokenizer_encode_ex(const trn_tokenizer *tok, const char *text, size_t len, int flags,
                                          trn_tokens *out);

/* ---- files ------------------------------------------------------------
   llm.c token shards: a header of 256 little-endian int32, [0] = magic,
   [1] = version, [2] = number of tokens N (the rest 0); then N ids.
   Two kinds, both llm.c's own (dev/data/data_common.py, HEADERS_INFO):
     magic 20240520, version 1: uint16 ids, 1024 + 2*N bytes (GPT-2's
                                50,257 tokens; any vocabulary <= 65,536)
     magic 20240801, version 7: uint32 ids, 1024 + 4*N bytes (llm.c's
                                "llama-3" format: Llama 3's 128,256 tokens)
   The reader takes both and is strict: a known (magic, version) pair, the
   file exactly its header's size, every uint32 id < 2^31 (ids are int
   here); anything else is TRN_ERR_FORMAT naming the file in one line. */
#define TRN_TOKEN_SHARD_MAGIC 20240520   /* uint16 ids ...            */
#define TRN_TOKEN_SHARD_VERSION 1        /* ... with this version     */
#define TRN_TOKEN_SHARD_MAGIC32 20240801 /* uint32 ids ...            */
#define TRN_TOKEN_SHARD_VERSION32 7      /* ... with this version     */
/* append the shard's ids to *out; *bits, when not NULL, gets 16 or 32 (the
   width the file holds). TRN_ERR_IO, or TRN_ERR_FORMAT with the reason
   (bad magic, bad version, size does not match the header, an id >= 2^31);
   a failed read appends nothing */
TRNDEF trn_result trn_token_shard_read_bits(trn_tokens *out, const char *path, int *bits);
TRNDEF trn_result trn_token_shard_read(trn_tokens *out, const char *path); /* (bits not wanted) */
/* write ids as a shard, atomically (path.tmp, then rename). bits: 16 (the
   uint16 format), 32 (the uint32 format), or 0: 16 when every id < 65536,
   else 32. TRN_ERR_INVALID when an id is negative, or > 65535 with bits
   16, or bits is none of these, or n > INT32_MAX; TRN_ERR_IO */
TRNDEF trn_result trn_token_shard_write_bits(const char *path, const int *ids, size_t n, int bits);
TRNDEF trn_result trn_token_shard_write(const char *path, const int *ids, size_t n); /* bits 0 */
/* does the file start with either shard magic? (nothing else is checked;
   0 when it cannot be read) */
TRNDEF int trn_token_shard_sniff(const char *path);
/* old names (deprecated; "shard" alone is train_nccl.h's ZeRO/FSDP word) */
#define trn_shard_read trn_token_shard_read
#define trn_shard_write trn_token_shard_write
#define TRN_SHARD_MAGIC TRN_TOKEN_SHARD_MAGIC
#define TRN_SHARD_VERSION TRN_TOKEN_SHARD_VERSION
/* read files and concatenate their bytes into one trn_alloc'd buffer (free
   with trn_free), NUL-terminated for convenience (*len excludes it). With
   missing_ok, files that do not exist are skipped, but at least one must
   be read. The default corpus of examples/gpt2 is this with the kit's own
   sources (train.h, README.md, the examples' .c files). */
TRNDEF trn_result trn_text_read_files(char **text, size_t *len, const char *const *paths,
                                      int n_paths, int missing_ok);
/* one data file into *out (appended): an llm.c shard when the name ends in
   ".bin" or the file starts with a shard magic, otherwise text encoded
   with tok. An empty file or a shard of 0 tokens is TRN_ERR_INVALID. */
TRNDEF trn_result trn_tokens_load(trn_tokens *out, const char *path, const trn_tokenizer *tok);

/* ---- the loader -------------------------------------------------------
   Split: the first tokens train, the last val_fraction of them validate.
   A batch row is a window of T+1 consecutive tokens: x = window[0..T),
   y = window[1..T]. Windows start at multiples of T (consecutive windows
   share one token), so a split of n tokens has (n-1)/T windows.
   Training order: each epoch visits a permutation of the training windows
   drawn from (seed, epoch), B windows per batch; the last windows that do
   not fill a batch are skipped that epoch. With sequential = 1 the order
   is llm.c's instead: window after window through the split.
   Because the permutation is a pure function of (seed, epoch), the whole
   loader state is trn_loader_pos: four integers to save in a checkpoint.
   Validation batch i is always windows i*B .. i*B+B-1 of the validation
   split, so every evaluation sees the same tokens. */
typedef struct trn_loader_desc {
    int B, T;                  /* rows per batch, tokens per row (required) */
    float val_fraction;        /* default 0.1: the last 10% of the tokens   */
    int no_val;                /* 1: everything trains, no validation       */
    int sequential;            /* 1: llm.c's order; default: seeded shuffle */
    uint64_t seed;             /* shuffle seed (0 is a seed like any other) */
} trn_loader_desc;

typedef struct trn_loader_pos {
    int64_t epoch;             /* full passes over the training split       */
    int64_t batch;             /* batches taken in this epoch               */
    uint64_t seed;             /* the shuffle seed                          */
    uint64_t check;            /* fingerprint of split sizes, B, T and order:
                                  seek refuses a position from other data   */
} trn_loader_pos;

typedef struct trn_loader {
    trn_loader_desc desc;      /* effective values                          */
    const int *tokens;         /* borrowed: the caller keeps them alive     */
    size_t n_train, n_val;     /* train = tokens[0, n_train), val = the rest */
    size_t train_windows, val_windows;
    int64_t batches_per_epoch; /* train_windows / B                         */
    int64_t val_batches;       /* val_windows / B (0 with no_val)           */
    trn_loader_pos pos;
    int *order;                /* window visiting order of pos.epoch (RUNTIME) */
} trn_loader;

/* TRN_ERR_INVALID with a reason when B or T < 1, val_fraction is outside
   [0,1), or a split has fewer than B*T+1 tokens; TRN_ERR_NOMEM */
TRNDEF trn_result trn_loader_init(trn_loader *L, const int *tokens, size_t n,
                                  const trn_loader_desc *desc);
TRNDEF void trn_loader_free(trn_loader *L);
/* the next training batch: x and y are (B,T) each, row-major; advances the
   position (and rolls into the next epoch after the last batch) */
TRNDEF void trn_loader_next(trn_loader *L, int *x, int *y);
/* validation batch i (taken modulo val_batches); does not touch the
   position. Calling it with no validation split is a programmer error. */
TRNDEF void trn_loader_val_batch(const trn_loader *L, int64_t i, int *x, int *y);
TRNDEF trn_loader_pos trn_loader_tell(const trn_loader *L);
/* continue from a saved position: the next batch is the one that would
   have followed. TRN_ERR_MISMATCH when it belongs to other data or another
   B/T/order, TRN_ERR_INVALID when it is out of range. */
TRNDEF trn_result trn_loader_seek(trn_loader *L, const trn_loader_pos *pos);

/* <<data declarations end */

#ifdef __cplusplus
}
#endif
#endif /* TRAIN_DATA_H_INCLUDED */

#if defined(TRAIN_DATA_IMPLEMENTATION) && !defined(TRAIN_IMPLEMENTATION)
#error "extras/train_data.h: TRAIN_DATA_IMPLEMENTATION needs TRAIN_IMPLEMENTATION in the same file (define it before train.h)"
#endif
#ifdef TRAIN_IMPLEMENTATION
#ifndef TRAIN_IMPLEMENTATION_DONE
#error "extras/train_data.h: train.h's implementation is not in this file (define TRAIN_IMPLEMENTATION before the first #include \"train.h\")"
#endif
#ifndef TRAIN_DATA_IMPLEMENTATION_DONE
#define TRAIN_DATA_IMPLEMENTATION_DONE

/* >>data implementation */
#include <ctype.h>
#include <limits.h>

/* ---- token arrays ------------------------------------------------------ */
static trn_result trn__tokens_reserve(trn_tokens *t, size_t more) {
    size_t need, cap;
    int *ids;
    if (more > (size_t)-1 / sizeof(int) - t->n)
        return trn_fail(TRN_ERR_NOMEM, "tokens: %zu more ids is too many", more);
    need = t->n + more;
    if (need <= t->cap) return TRN_OK;
    cap = t->cap ? t->cap : 4096;
    while (cap < need) cap = cap > (size_t)-1 / sizeof(int) / 2 ? need : cap * 2;
    ids = (int *)trn_alloc(cap * sizeof(int), TRN_KIND_RUNTIME);
    if (!ids) return TRN_ERR_NOMEM; /* trn_alloc left the reason */
    if (t->n) memcpy(ids, t->ids, t->n * sizeof(int));
    trn_free(t->ids);
    t->ids = ids;
    t->cap = cap;
    return TRN_OK;
}

TRNDEF trn_result trn_tokens_append(trn_tokens *t, const int *ids, size_t n) {
    trn_result r;
    if (!t || (!ids && n)) return trn_fail(TRN_ERR_INVALID, "trn_tokens_append: NULL argument");
    if ((r = trn__tokens_reserve(t, n)) != TRN_OK) return r;
    if (n) memcpy(t->ids + t->n, ids, n * sizeof(int));
    t->n += n;
    return TRN_OK;
}

TRNDEF void trn_tokens_free(trn_tokens *t) {
    if (!t) return;
    trn_free(t->ids);
    t->ids = NULL; t->n = t->cap = 0;
}

TRNDEF trn_result trn_tokens_check(const int *ids, size_t n, int vocab_size) {
    size_t i;
    if (vocab_size <= 0) return trn_fail(TRN_ERR_INVALID, "tokens check: vocab size %d", vocab_size);
    if (!ids && n) return trn_fail(TRN_ERR_INVALID, "tokens check: NULL ids");
    for (i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= vocab_size)
            return trn_fail(TRN_ERR_MISMATCH, "token %d at position %zu is outside the vocabulary "
                            "[0, %d): data made for a larger vocabulary?", ids[i], i, vocab_size);
    return TRN_OK;
}

/* ---- bytes, files ------------------------------------------------------ */
typedef struct trn__dbuf { char *p; size_t n, cap; trn_kind kind; } trn__dbuf;

/* room for `more` bytes plus a NUL after them */
static trn_result trn__dbuf_reserve(trn__dbuf *b, size_t more) {
    size_t cap;
    char *p;
    if (more > (size_t)-1 / 4 - b->n)
        return trn_fail(TRN_ERR_NOMEM, "buffer: %zu more bytes is too many", more);
    if (b->n + more + 1 <= b->cap) return TRN_OK;
    cap = b->cap ? b->cap : 256;
    while (cap < b->n + more + 1) cap *= 2;
    p = (char *)trn_alloc(cap, b->kind);
    if (!p) return TRN_ERR_NOMEM;
    if (b->n) memcpy(p, b->p, b->n);
    trn_free(b->p);
    b->p = p;
    b->cap = cap;
    return TRN_OK;
}

static trn_result trn__dbuf_put(trn__dbuf *b, const void *src, size_t n) {
    trn_result r = trn__dbuf_reserve(b, n);
    if (r != TRN_OK) return r;
    memcpy(b->p + b->n, src, n);
    b->n += n;
    b->p[b->n] = 0;
    return TRN_OK;
}

/* append a whole file to b; missing (ENOENT) reports 1 in *missing if asked */
static trn_result trn__data_slurp(trn__dbuf *b, const char *path, int *missing) {
    FILE *f;
    trn_result r = TRN_OK;
    if (trn_check_regular(path) != TRN_OK && errno != ENOENT) /* a FIFO would block fopen; a directory is no text */
        return trn_fail(TRN_ERR_IO, "open %s", trn_error_reason());
    f = fopen(path, "rb");
    if (!f) {
        if (missing && errno == ENOENT) { *missing = 1; return TRN_OK; }
        return trn_fail(TRN_ERR_IO, "open %s: %s", path, strerror(errno));
    }
    if (missing) *missing = 0;
    for (;;) {
        size_t got;
        if ((r = trn__dbuf_reserve(b, 65536)) != TRN_OK) break;
        got = fread(b->p + b->n, 1, 65536, f);
        b->n += got;
        b->p[b->n] = 0;
        if (got < 65536) {
            if (ferror(f)) r = trn_fail(TRN_ERR_IO, "read %s: %s", path, strerror(errno));
            break;
        }
    }
    fclose(f);
    return r;
}

TRNDEF trn_result trn_text_read_files(char **text, size_t *len, const char *const *paths,
                                      int n_paths, int missing_ok) {
    trn__dbuf b = {NULL, 0, 0, TRN_KIND_TEMP};
    trn_result r;
    int i, n_read = 0;
    if (!text || !len || (!paths && n_paths))
        return trn_fail(TRN_ERR_INVALID, "trn_text_read_files: NULL argument");
    *text = NULL; *len = 0;
    if ((r = trn__dbuf_reserve(&b, 0)) != TRN_OK) return r;
    for (i = 0; i < n_paths; i++) {
        int missing = 0;
        if (!paths[i]) {
            trn_free(b.p);
            return trn_fail(TRN_ERR_INVALID, "trn_text_read_files: path %d is NULL", i);
        }
        r = trn__data_slurp(&b, paths[i], missing_ok ? &missing : NULL);
        if (r != TRN_OK) { trn_free(b.p); return r; }
        n_read += !missing;
    }
    if (n_read == 0) {
        trn_free(b.p);
        return trn_fail(TRN_ERR_IO, "none of the %d text files exists (the first is %s)", n_paths,
                        n_paths ? paths[0] : "(none)");
    }
    *text = b.p; *len = b.n;
    return TRN_OK;
}

/* ---- GPT-2's character classes (UTF-8 itself is in >>json) --------------- */
/* Unicode letters (categories Lu Ll Lt Lm Lo) and numbers (Nd Nl No) from
   U+0080 to U+FFFF, as inclusive ranges. Derived from Python's unicodedata
   (Unicode 14.0): maximal runs of the category, joined across gaps that
   hold only unassigned code points (they never occur in real text; the
   `tokenizers` package's regex engine may know a newer Unicode, and a
   character new since 14.0 is classed by the range it falls in). */
static const uint16_t trn__uni_letters[][2] = {
    {0xAA,0xAA}, {0xB5,0xB5}, {0xBA,0xBA}, {0xC0,0xD6}, {0xD8,0xF6}, {0xF8,0x2C1},
    {0x2C6,0x2D1}, {0x2E0,0x2E4}, {0x2EC,0x2EC}, {0x2EE,0x2EE}, {0x370,0x374},
    {0x376,0x37D}, {0x37F,0x37F}, {0x386,0x386}, {0x388,0x3F5}, {0x3F7,0x481},
    {0x48A,0x559}, {0x560,0x588}, {0x5D0,0x5F2}, {0x620,0x64A}, {0x66E,0x66F},
    {0x671,0x6D3}, {0x6D5,0x6D5}, {0x6E5,0x6E6}, {0x6EE,0x6EF}, {0x6FA,0x6FC},
    {0x6FF,0x6FF}, {0x710,0x710}, {0x712,0x72F}, {0x74D,0x7A5}, {0x7B1,0x7B1},
    {0x7CA,0x7EA}, {0x7F4,0x7F5}, {0x7FA,0x7FA}, {0x800,0x815}, {0x81A,0x81A},
    {0x824,0x824}, {0x828,0x828}, {0x840,0x858}, {0x860,0x887}, {0x889,0x88E},
    {0x8A0,0x8C9}, {0x904,0x939}, {0x93D,0x93D}, {0x950,0x950}, {0x958,0x961},
    {0x971,0x980}, {0x985,0x9B9}, {0x9BD,0x9BD}, {0x9CE,0x9CE}, {0x9DC,0x9E1},
    {0x9F0,0x9F1}, {0x9FC,0x9FC}, {0xA05,0xA39}, {0xA59,0xA5E}, {0xA72,0xA74},
    {0xA85,0xAB9}, {0xABD,0xABD}, {0xAD0,0xAE1}, {0xAF9,0xAF9}, {0xB05,0xB39},
    {0xB3D,0xB3D}, {0xB5C,0xB61}, {0xB71,0xB71}, {0xB83,0xBB9}, {0xBD0,0xBD0},
    {0xC05,0xC39}, {0xC3D,0xC3D}, {0xC58,0xC61}, {0xC80,0xC80}, {0xC85,0xCB9},
    {0xCBD,0xCBD}, {0xCDD,0xCE1}, {0xCF1,0xCF2}, {0xD04,0xD3A}, {0xD3D,0xD3D},
    {0xD4E,0xD4E}, {0xD54,0xD56}, {0xD5F,0xD61}, {0xD7A,0xD7F}, {0xD85,0xDC6},
    {0xE01,0xE30}, {0xE32,0xE33}, {0xE40,0xE46}, {0xE81,0xEB0}, {0xEB2,0xEB3},
    {0xEBD,0xEC6}, {0xEDC,0xF00}, {0xF40,0xF6C}, {0xF88,0xF8C}, {0x1000,0x102A},
    {0x103F,0x103F}, {0x1050,0x1055}, {0x105A,0x105D}, {0x1061,0x1061}, {0x1065,0x1066},
    {0x106E,0x1070}, {0x1075,0x1081}, {0x108E,0x108E}, {0x10A0,0x10FA}, {0x10FC,0x135A},
    {0x1380,0x138F}, {0x13A0,0x13FD}, {0x1401,0x166C}, {0x166F,0x167F}, {0x1681,0x169A},
    {0x16A0,0x16EA}, {0x16F1,0x1711}, {0x171F,0x1731}, {0x1740,0x1751}, {0x1760,0x1770},
    {0x1780,0x17B3}, {0x17D7,0x17D7}, {0x17DC,0x17DC}, {0x1820,0x1884}, {0x1887,0x18A8},
    {0x18AA,0x191E}, {0x1950,0x19C9}, {0x1A00,0x1A16}, {0x1A20,0x1A54}, {0x1AA7,0x1AA7},
    {0x1B05,0x1B33}, {0x1B45,0x1B4C}, {0x1B83,0x1BA0}, {0x1BAE,0x1BAF}, {0x1BBA,0x1BE5},
    {0x1C00,0x1C23}, {0x1C4D,0x1C4F}, {0x1C5A,0x1C7D}, {0x1C80,0x1CBF}, {0x1CE9,0x1CEC},
    {0x1CEE,0x1CF3}, {0x1CF5,0x1CF6}, {0x1CFA,0x1DBF}, {0x1E00,0x1FBC}, {0x1FBE,0x1FBE},
    {0x1FC2,0x1FCC}, {0x1FD0,0x1FDB}, {0x1FE0,0x1FEC}, {0x1FF2,0x1FFC}, {0x2071,0x2071},
    {0x207F,0x207F}, {0x2090,0x209C}, {0x2102,0x2102}, {0x2107,0x2107}, {0x210A,0x2113},
    {0x2115,0x2115}, {0x2119,0x211D}, {0x2124,0x2124}, {0x2126,0x2126}, {0x2128,0x2128},
    {0x212A,0x212D}, {0x212F,0x2139}, {0x213C,0x213F}, {0x2145,0x2149}, {0x214E,0x214E},
    {0x2183,0x2184}, {0x2C00,0x2CE4}, {0x2CEB,0x2CEE}, {0x2CF2,0x2CF3}, {0x2D00,0x2D6F},
    {0x2D80,0x2DDE}, {0x2E2F,0x2E2F}, {0x3005,0x3006}, {0x3031,0x3035}, {0x303B,0x303C},
    {0x3041,0x3096}, {0x309D,0x309F}, {0x30A1,0x30FA}, {0x30FC,0x318E}, {0x31A0,0x31BF},
    {0x31F0,0x31FF}, {0x3400,0x4DBF}, {0x4E00,0xA48C}, {0xA4D0,0xA4FD}, {0xA500,0xA60C},
    {0xA610,0xA61F}, {0xA62A,0xA66E}, {0xA67F,0xA69D}, {0xA6A0,0xA6E5}, {0xA717,0xA71F},
    {0xA722,0xA788}, {0xA78B,0xA801}, {0xA803,0xA805}, {0xA807,0xA80A}, {0xA80C,0xA822},
    {0xA840,0xA873}, {0xA882,0xA8B3}, {0xA8F2,0xA8F7}, {0xA8FB,0xA8FB}, {0xA8FD,0xA8FE},
    {0xA90A,0xA925}, {0xA930,0xA946}, {0xA960,0xA97C}, {0xA984,0xA9B2}, {0xA9CF,0xA9CF},
    {0xA9E0,0xA9E4}, {0xA9E6,0xA9EF}, {0xA9FA,0xAA28}, {0xAA40,0xAA42}, {0xAA44,0xAA4B},
    {0xAA60,0xAA76}, {0xAA7A,0xAA7A}, {0xAA7E,0xAAAF}, {0xAAB1,0xAAB1}, {0xAAB5,0xAAB6},
    {0xAAB9,0xAABD}, {0xAAC0,0xAAC0}, {0xAAC2,0xAADD}, {0xAAE0,0xAAEA}, {0xAAF2,0xAAF4},
    {0xAB01,0xAB5A}, {0xAB5C,0xAB69}, {0xAB70,0xABE2}, {0xAC00,0xD7FB}, {0xF900,0xFB1D},
    {0xFB1F,0xFB28}, {0xFB2A,0xFBB1}, {0xFBD3,0xFD3D}, {0xFD50,0xFDC7}, {0xFDF0,0xFDFB},
    {0xFE70,0xFEFC}, {0xFF21,0xFF3A}, {0xFF41,0xFF5A}, {0xFF66,0xFFDC},
};
static const uint16_t trn__uni_numbers[][2] = {
    {0xB2,0xB3}, {0xB9,0xB9}, {0xBC,0xBE}, {0x660,0x669}, {0x6F0,0x6F9}, {0x7C0,0x7C9},
    {0x966,0x96F}, {0x9E6,0x9EF}, {0x9F4,0x9F9}, {0xA66,0xA6F}, {0xAE6,0xAEF},
    {0xB66,0xB6F}, {0xB72,0xB77}, {0xBE6,0xBF2}, {0xC66,0xC6F}, {0xC78,0xC7E},
    {0xCE6,0xCEF}, {0xD58,0xD5E}, {0xD66,0xD78}, {0xDE6,0xDEF}, {0xE50,0xE59},
    {0xED0,0xED9}, {0xF20,0xF33}, {0x1040,0x1049}, {0x1090,0x1099}, {0x1369,0x137C},
    {0x16EE,0x16F0}, {0x17E0,0x17F9}, {0x1810,0x1819}, {0x1946,0x194F}, {0x19D0,0x19DA},
    {0x1A80,0x1A99}, {0x1B50,0x1B59}, {0x1BB0,0x1BB9}, {0x1C40,0x1C49}, {0x1C50,0x1C59},
    {0x2070,0x2070}, {0x2074,0x2079}, {0x2080,0x2089}, {0x2150,0x2182}, {0x2185,0x2189},
    {0x2460,0x249B}, {0x24EA,0x24FF}, {0x2776,0x2793}, {0x2CFD,0x2CFD}, {0x3007,0x3007},
    {0x3021,0x3029}, {0x3038,0x303A}, {0x3192,0x3195}, {0x3220,0x3229}, {0x3248,0x324F},
    {0x3251,0x325F}, {0x3280,0x3289}, {0x32B1,0x32BF}, {0xA620,0xA629}, {0xA6E6,0xA6EF},
    {0xA830,0xA835}, {0xA8D0,0xA8D9}, {0xA900,0xA909}, {0xA9D0,0xA9D9}, {0xA9F0,0xA9F9},
    {0xAA50,0xAA59}, {0xABF0,0xABF9}, {0xFF10,0xFF19},
};

/* Above U+FFFF, made the same way (historic scripts, CJK extensions, math
   letters and digits). These must be exact too, not coarse blocks: one mark
   classed as a letter changes the pieces around it. With U+110BA KAITHI
   SIGN NUKTA (a mark, Mn) taken for a letter, "\U00011099\U000110BA`trn"
   was cut [U+11099 U+110BA] [`trn] instead of the package's [U+11099]
   [U+110BA `] [trn]: Llama 3's "[^\r\n\p{L}\p{N}]?\p{L}+" then took the
   backquote as the prefix of "trn" (tests/hf_tokenizer_ref.py keeps the
   case among its fixed documents; hf_tokenizer_check's @classes compares
   every assigned code point with the package's regex classes). */
static const uint32_t trn__uni_astral_letters[][2] = {
    {0x10000,0x100FA}, {0x10280,0x102D0}, {0x10300,0x1031F}, {0x1032D,0x10340}, {0x10342,0x10349},
    {0x10350,0x10375}, {0x10380,0x1039D}, {0x103A0,0x103CF}, {0x10400,0x1049D}, {0x104B0,0x10563},
    {0x10570,0x10855}, {0x10860,0x10876}, {0x10880,0x1089E}, {0x108E0,0x108F5}, {0x10900,0x10915},
    {0x10920,0x10939}, {0x10980,0x109B7}, {0x109BE,0x109BF}, {0x10A00,0x10A00}, {0x10A10,0x10A35},
    {0x10A60,0x10A7C}, {0x10A80,0x10A9C}, {0x10AC0,0x10AC7}, {0x10AC9,0x10AE4}, {0x10B00,0x10B35},
    {0x10B40,0x10B55}, {0x10B60,0x10B72}, {0x10B80,0x10B91}, {0x10C00,0x10CF2}, {0x10D00,0x10D23},
    {0x10E80,0x10EA9}, {0x10EB0,0x10F1C}, {0x10F27,0x10F45}, {0x10F70,0x10F81}, {0x10FB0,0x10FC4},
    {0x10FE0,0x10FF6}, {0x11003,0x11037}, {0x11071,0x11072}, {0x11075,0x11075}, {0x11083,0x110AF},
    {0x110D0,0x110E8}, {0x11103,0x11126}, {0x11144,0x11144}, {0x11147,0x11172}, {0x11176,0x11176},
    {0x11183,0x111B2}, {0x111C1,0x111C4}, {0x111DA,0x111DA}, {0x111DC,0x111DC}, {0x11200,0x1122B},
    {0x11280,0x112A8}, {0x112B0,0x112DE}, {0x11305,0x11339}, {0x1133D,0x1133D}, {0x11350,0x11350},
    {0x1135D,0x11361}, {0x11400,0x11434}, {0x11447,0x1144A}, {0x1145F,0x114AF}, {0x114C4,0x114C5},
    {0x114C7,0x114C7}, {0x11580,0x115AE}, {0x115D8,0x115DB}, {0x11600,0x1162F}, {0x11644,0x11644},
    {0x11680,0x116AA}, {0x116B8,0x116B8}, {0x11700,0x1171A}, {0x11740,0x1182B}, {0x118A0,0x118DF},
    {0x118FF,0x1192F}, {0x1193F,0x1193F}, {0x11941,0x11941}, {0x119A0,0x119D0}, {0x119E1,0x119E1},
    {0x119E3,0x119E3}, {0x11A00,0x11A00}, {0x11A0B,0x11A32}, {0x11A3A,0x11A3A}, {0x11A50,0x11A50},
    {0x11A5C,0x11A89}, {0x11A9D,0x11A9D}, {0x11AB0,0x11C2E}, {0x11C40,0x11C40}, {0x11C72,0x11C8F},
    {0x11D00,0x11D30}, {0x11D46,0x11D46}, {0x11D60,0x11D89}, {0x11D98,0x11D98}, {0x11EE0,0x11EF2},
    {0x11FB0,0x11FB0}, {0x12000,0x12399}, {0x12480,0x12FF0}, {0x13000,0x1342E}, {0x14400,0x16A5E},
    {0x16A70,0x16ABE}, {0x16AD0,0x16AED}, {0x16B00,0x16B2F}, {0x16B40,0x16B43}, {0x16B63,0x16E7F},
    {0x16F00,0x16F4A}, {0x16F50,0x16F50}, {0x16F93,0x16FE1}, {0x16FE3,0x16FE3}, {0x17000,0x1BC99},
    {0x1D400,0x1D6C0}, {0x1D6C2,0x1D6DA}, {0x1D6DC,0x1D6FA}, {0x1D6FC,0x1D714}, {0x1D716,0x1D734},
    {0x1D736,0x1D74E}, {0x1D750,0x1D76E}, {0x1D770,0x1D788}, {0x1D78A,0x1D7A8}, {0x1D7AA,0x1D7C2},
    {0x1D7C4,0x1D7CB}, {0x1DF00,0x1DF1E}, {0x1E100,0x1E12C}, {0x1E137,0x1E13D}, {0x1E14E,0x1E14E},
    {0x1E290,0x1E2AD}, {0x1E2C0,0x1E2EB}, {0x1E7E0,0x1E8C4}, {0x1E900,0x1E943}, {0x1E94B,0x1E94B},
    {0x1EE00,0x1EEBB}, {0x20000,0x3134A},
};
static const uint32_t trn__uni_astral_numbers[][2] = {
    {0x10107,0x10133}, {0x10140,0x10178}, {0x1018A,0x1018B}, {0x102E1,0x102FB}, {0x10320,0x10323},
    {0x10341,0x10341}, {0x1034A,0x1034A}, {0x103D1,0x103D5}, {0x104A0,0x104A9}, {0x10858,0x1085F},
    {0x10879,0x1087F}, {0x108A7,0x108AF}, {0x108FB,0x108FF}, {0x10916,0x1091B}, {0x109BC,0x109BD},
    {0x109C0,0x109FF}, {0x10A40,0x10A48}, {0x10A7D,0x10A7E}, {0x10A9D,0x10A9F}, {0x10AEB,0x10AEF},
    {0x10B58,0x10B5F}, {0x10B78,0x10B7F}, {0x10BA9,0x10BAF}, {0x10CFA,0x10CFF}, {0x10D30,0x10E7E},
    {0x10F1D,0x10F26}, {0x10F51,0x10F54}, {0x10FC5,0x10FCB}, {0x11052,0x1106F}, {0x110F0,0x110F9},
    {0x11136,0x1113F}, {0x111D0,0x111D9}, {0x111E1,0x111F4}, {0x112F0,0x112F9}, {0x11450,0x11459},
    {0x114D0,0x114D9}, {0x11650,0x11659}, {0x116C0,0x116C9}, {0x11730,0x1173B}, {0x118E0,0x118F2},
    {0x11950,0x11959}, {0x11C50,0x11C6C}, {0x11D50,0x11D59}, {0x11DA0,0x11DA9}, {0x11FC0,0x11FD4},
    {0x12400,0x1246E}, {0x16A60,0x16A69}, {0x16AC0,0x16AC9}, {0x16B50,0x16B61}, {0x16E80,0x16E96},
    {0x1D2E0,0x1D2F3}, {0x1D360,0x1D378}, {0x1D7CE,0x1D7FF}, {0x1E140,0x1E149}, {0x1E2F0,0x1E2F9},
    {0x1E8C7,0x1E8CF}, {0x1E950,0x1E959}, {0x1EC71,0x1ECAB}, {0x1ECAD,0x1ECAF}, {0x1ECB1,0x1ED2D},
    {0x1ED2F,0x1ED3D}, {0x1F100,0x1F10C}, {0x1FBF0,0x1FBF9},
};

#define TRN__COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

static int trn__uni_in16(const uint16_t (*r)[2], int n, uint32_t cp) {
    int lo = 0, hi = n - 1;
    while (lo <= hi) {           /* binary search over sorted ranges */
        int mid = (lo + hi) / 2;
        if (cp < r[mid][0]) hi = mid - 1;
        else if (cp > r[mid][1]) lo = mid + 1;
        else return 1;
    }
    return 0;
}

static int trn__uni_in32(const uint32_t (*r)[2], int n, uint32_t cp) {
    int lo = 0, hi = n - 1;
    while (lo <= hi) {           /* the same search, on 32-bit ranges */
        int mid = (lo + hi) / 2;
        if (cp < r[mid][0]) hi = mid - 1;
        else if (cp > r[mid][1]) lo = mid + 1;
        else return 1;
    }
    return 0;
}

enum { TRN__CH_OTHER, TRN__CH_SPACE, TRN__CH_LETTER, TRN__CH_NUMBER };

static int trn__char_class(uint32_t c) {
    if (c < 0x80) {
        if (c == ' ' || (c >= 0x09 && c <= 0x0D)) return TRN__CH_SPACE;
        if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') return TRN__CH_LETTER;
        if (c >= '0' && c <= '9') return TRN__CH_NUMBER;
        return TRN__CH_OTHER;
    }
    if (c == TRN__NO_CHAR) return TRN__CH_OTHER;
    /* Unicode White_Space, which is what \s means in GPT-2's regex */
    if (c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 ||
        c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000)
        return TRN__CH_SPACE;
    if (c < 0x10000) {
        if (trn__uni_in16(trn__uni_letters, TRN__COUNT(trn__uni_letters), c)) return TRN__CH_LETTER;
        if (trn__uni_in16(trn__uni_numbers, TRN__COUNT(trn__uni_numbers), c)) return TRN__CH_NUMBER;
        return TRN__CH_OTHER;
    }
    if (trn__uni_in32(trn__uni_astral_letters, TRN__COUNT(trn__uni_astral_letters), c))
        return TRN__CH_LETTER;
    if (trn__uni_in32(trn__uni_astral_numbers, TRN__COUNT(trn__uni_astral_numbers), c))
        return TRN__CH_NUMBER;
    return TRN__CH_OTHER;
}

/* class of the character at s[i] (i < n); its byte length in *w */
static int trn__class_at(const unsigned char *s, size_t n, size_t i, size_t *w) {
    uint32_t cp;
    *w = trn__utf8_decode(s + i, n - i, &cp);
    return trn__char_class(cp);
}

TRNDEF size_t trn_bpe_pretoken_len(const char *text, size_t len) {
    const unsigned char *s = (const unsigned char *)text;
    size_t i, w, end, last_w = 0;
    int c;
    if (!text || len == 0) return 0;
    /* 1. 's 't 're 've 'm 'll 'd */
    if (s[0] == '\'' && len >= 2) {
        if (len >= 3 && ((s[1] == 'r' && s[2] == 'e') || (s[1] == 'v' && s[2] == 'e') ||
                         (s[1] == 'l' && s[2] == 'l')))
            return 3;
        if (s[1] == 's' || s[1] == 't' || s[1] == 'm' || s[1] == 'd') return 2;
    }
    /* 2. ' ?\p{L}+', ' ?\p{N}+', ' ?[^\s\p{L}\p{N}]+': an optional ASCII
       space, then a run of one class (the run must not be empty) */
    i = (s[0] == ' ' && len > 1) ? 1 : 0;
    c = trn__class_at(s, len, i, &w);
    if (c != TRN__CH_SPACE) {
        end = i + w;
        while (end < len && trn__class_at(s, len, end, &w) == c) end += w;
        return end;
    }
    /* 3. '\s+(?!\S)' then '\s+': the whole whitespace run if it ends the
       text or only more whitespace could follow; if a non-space follows,
       the run minus its last character (that one joins the next piece, as
       the optional space of rule 2 or a whitespace piece of its own) */
    end = 0;
    while (end < len && trn__class_at(s, len, end, &w) == TRN__CH_SPACE) { end += w; last_w = w; }
    if (end == len || end == last_w) return end;
    return end - last_w;
}

/* ---- GPT-2 BPE: loading ------------------------------------------------ */
/* GPT-2's printable alphabet for bytes (see the declarations) */
static int trn__bpe_visible(int b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

/* the byte a character of the alphabet stands for, or -1 */
static int trn__bpe_byte_of(uint32_t cp) {
    int b, k = 0;
    if (cp < 256) return trn__bpe_visible((int)cp) ? (int)cp : -1;
    if (cp >= 256 + 68) return -1;
    for (b = 0; b < 256; b++)
        if (!trn__bpe_visible(b) && 256 + k++ == (int)cp) return b;
    return -1;
}

/* append what one character of a vocab/merges string means in bytes */
static trn_result trn__bpe_put_char(trn__dbuf *out, const int *byte_of, uint32_t cp) {
    char u[4];
    if (byte_of && cp < 256 + 68 && byte_of[cp] >= 0) { u[0] = (char)byte_of[cp]; return trn__dbuf_put(out, u, 1); }
    return trn__dbuf_put(out, u, trn__utf8_encode(cp, u)); /* outside the alphabet */
}

static uint64_t trn__fnv1a(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    size_t i;
    for (i = 0; i < n; i++) { h ^= (unsigned char)s[i]; h *= 1099511628211ull; }
    return h;
}

static uint64_t trn__mix64(uint64_t z) { /* splitmix64's finalizer */
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

TRNDEF int trn_tokenizer_find(const trn_tokenizer *tok, const char *bytes, size_t len) {
    size_t mask, i;
    if (!tok || (!bytes && len)) return -1;
    if (tok->kind == TRN_TOKENIZER_BYTES) return len == 1 ? (unsigned char)bytes[0] : -1;
    if (!tok->lookup) return -1;
    mask = tok->lookup_cap - 1;
    for (i = (size_t)trn__fnv1a(bytes, len) & mask;; i = (i + 1) & mask) {
        int id = tok->lookup[i];
        if (id < 0) return -1;
        if (tok->len[id] == len && memcmp(tok->bytes + tok->off[id], bytes, len) == 0) return id;
    }
}

static const trn_bpe_merge *trn__bpe_merge_find(const trn_tokenizer *tok, int left, int right) {
    size_t mask = tok->merges_cap - 1, i;
    for (i = (size_t)trn__mix64(((uint64_t)(uint32_t)left << 32) | (uint32_t)right) & mask;;
         i = (i + 1) & mask) {
        const trn_bpe_merge *m = &tok->merges[i];
        if (m->left < 0) return NULL;
        if (m->left == left && m->right == right) return m;
    }
}

TRNDEF void trn_tokenizer_init_bytes(trn_tokenizer *tok) {
    int b;
    if (!tok) trn_fatal("trn_tokenizer_init_bytes: NULL tokenizer");
    memset(tok, 0, sizeof *tok);
    tok->kind = TRN_TOKENIZER_BYTES;
    tok->vocab_size = 256;
    tok->eot_id = tok->unk_id = tok->bos_id = tok->eos_id = -1;
    for (b = 0; b < 256; b++) { tok->byte_id[b] = b; tok->byte_token[b] = -1; }
}

TRNDEF void trn_tokenizer_free(trn_tokenizer *tok) {
    if (!tok) return;
    trn_free(tok->bytes); trn_free(tok->off); trn_free(tok->len);
    trn_free(tok->lookup); trn_free(tok->merges);
    trn_free(tok->added); trn_free(tok->added_text); trn_free(tok->added_by_byte);
    trn_free(tok->dec); trn_free(tok->dec_off); trn_free(tok->dec_len);
    trn_tokenizer_init_bytes(tok);
}

#define TRN__MAX_VOCAB (1 << 24)

/* parse vocab.json into tok->bytes/off/len (ids without a token get
   len UINT32_MAX) and tok->vocab_size */
/* the vocabulary object at the cursor (vocab.json's whole text, or the
   "vocab" of tokenizer.json): ids 0 .. max(its ids, min_size - 1) get
   tables. byte_of NULL: token strings are plain UTF-8 (no byte alphabet) */
static trn_result trn__bpe_parse_vocab(trn_tokenizer *tok, trn__jp *jp, const char *path, const int *byte_of,
                                       int min_size) {
    trn__dbuf text = {NULL, 0, 0, TRN_KIND_RUNTIME};
    trn__dbuf ent = {NULL, 0, 0, TRN_KIND_TEMP}; /* (off, len, id) triples */
    trn__jp j = *jp;
    trn_result r;
    size_t i, n_ent;
    int max_id = min_size - 1;
    if (!trn__jeat(&j, '{')) {
        r = trn__jerr(&j, "expected '{' (vocab.json is one object)");
        goto done;
    }
    if (!trn__jeat(&j, '}')) for (;;) {
        uint32_t e[3], cp = 0;
        int64_t v = 0;
        size_t start = text.n;
        if ((r = trn__jopen(&j)) != TRN_OK) goto done;
        for (;;) { /* the token's text, each character mapped through byte_of */
            if ((r = trn__jchar(&j, &cp)) != TRN_OK) goto done;
            if (cp == TRN__JSTR_END) break;
            if ((r = trn__bpe_put_char(&text, byte_of, cp)) != TRN_OK) goto done;
        }
        if (!trn__jeat(&j, ':')) { r = trn__jerr(&j, "expected ':'"); goto done; }
        if ((r = trn__jint(&j, 0, TRN__MAX_VOCAB - 1, &v)) != TRN_OK) goto done; /* a token id */
        if (text.n > 0xFFFFFFFFu / 2) { r = trn__jerr(&j, "vocabulary too large"); goto done; }
        e[0] = (uint32_t)start; e[1] = (uint32_t)(text.n - start); e[2] = (uint32_t)v;
        if ((r = trn__dbuf_put(&ent, e, sizeof e)) != TRN_OK) goto done;
        if ((int)v > max_id) max_id = (int)v;
        if (trn__jeat(&j, ',')) continue;
        if (trn__jeat(&j, '}')) break;
        r = trn__jerr(&j, "expected ',' or '}'");
        goto done;
    }
    *jp = j;
    n_ent = ent.n / (3 * sizeof(uint32_t));
    if (n_ent == 0) { r = trn_fail(TRN_ERR_FORMAT, "%s: the vocabulary is empty", path); goto done; }
    tok->vocab_size = max_id + 1;
    tok->off = (uint32_t *)trn_alloc((size_t)tok->vocab_size * sizeof(uint32_t), TRN_KIND_RUNTIME);
    tok->len = (uint32_t *)trn_alloc((size_t)tok->vocab_size * sizeof(uint32_t), TRN_KIND_RUNTIME);
    if (!tok->off || !tok->len) { r = TRN_ERR_NOMEM; goto done; }
    for (i = 0; i < (size_t)tok->vocab_size; i++) { tok->off[i] = 0; tok->len[i] = UINT32_MAX; }
    for (i = 0; i < n_ent; i++) {
        uint32_t e[3];
        memcpy(e, ent.p + i * sizeof e, sizeof e);
        if (tok->len[e[2]] != UINT32_MAX) {
            r = trn_fail(TRN_ERR_FORMAT, "%s: id %u is given to two tokens", path, e[2]);
            goto done;
        }
        tok->off[e[2]] = e[0];
        tok->len[e[2]] = e[1];
    }
    /* every token empty (vocab {"": 0}): still a buffer, so that bytes + off
       is never arithmetic on NULL (UBSan; found by tests/fuzz_tokenizer.c) */
    if (!text.p && (r = trn__dbuf_reserve(&text, 1)) != TRN_OK) goto done;
    tok->bytes = text.p;
    text.p = NULL;
done:
    trn_free(ent.p); trn_free(text.p);
    return r;
}

static trn_result trn__bpe_read_vocab(trn_tokenizer *tok, const char *path, const int *byte_of) {
    trn__dbuf file = {NULL, 0, 0, TRN_KIND_TEMP};
    trn__jp j;
    trn_result r;
    if ((r = trn__data_slurp(&file, path, NULL)) != TRN_OK) return r;
    trn__jp_init(&j, file.p, file.n, path, "bad JSON", 0); /* the kit's one JSON reader (>>json) */
    if (file.n >= 3 && memcmp(file.p, "\xEF\xBB\xBF", 3) == 0) j.p += 3; /* a UTF-8 byte order mark */
    if ((r = trn__bpe_parse_vocab(tok, &j, path, byte_of, 0)) == TRN_OK) {
        trn__jws(&j);
        if (j.p != j.end) r = trn__jerr(&j, "text after the object");
    }
    trn_free(file.p);
    return r;
}

static trn_result trn__bpe_build_lookup(trn_tokenizer *tok, const char *path) {
    size_t cap = 16, mask, i;
    int id;
    while (cap < 2 * (size_t)tok->vocab_size) cap *= 2;
    tok->lookup = (int *)trn_alloc(cap * sizeof(int), TRN_KIND_RUNTIME);
    if (!tok->lookup) return TRN_ERR_NOMEM;
    tok->lookup_cap = cap;
    mask = cap - 1;
    for (i = 0; i < cap; i++) tok->lookup[i] = -1;
    for (id = 0; id < tok->vocab_size; id++) {
        const char *s = tok->bytes + tok->off[id];
        size_t n = tok->len[id];
        if (tok->len[id] == UINT32_MAX) continue;
        for (i = (size_t)trn__fnv1a(s, n) & mask; tok->lookup[i] >= 0; i = (i + 1) & mask) {
            int other = tok->lookup[i];
            if (tok->len[other] == n && memcmp(tok->bytes + tok->off[other], s, n) == 0)
                return trn_fail(TRN_ERR_FORMAT, "%s: ids %d and %d are the same token", path, other, id);
        }
        tok->lookup[i] = id;
    }
    return TRN_OK;
}

/* one side of a merge line, s[0..n) in the alphabet, -> its token id */
static int trn__bpe_merge_side(const trn_tokenizer *tok, const int *byte_of, const char *s, size_t n,
                               trn__dbuf *scratch) {
    size_t i = 0;
    scratch->n = 0;
    while (i < n) {
        uint32_t cp;
        i += trn__utf8_decode((const unsigned char *)s + i, n - i, &cp);
        if (cp == TRN__NO_CHAR) return -2;
        if (trn__bpe_put_char(scratch, byte_of, cp) != TRN_OK) return -3;
    }
    return trn_tokenizer_find(tok, scratch->p, scratch->n);
}

/* allocate the merge hash table for up to n merges */
static trn_result trn__bpe_merges_alloc(trn_tokenizer *tok, size_t n) {
    size_t cap = 16, i;
    while (cap < 4 * (n + 1)) cap *= 2; /* load <= 1/4: a pair with no merge (most lookups) ends in ~1.3 probes */
    tok->merges = (trn_bpe_merge *)trn_alloc(cap * sizeof(trn_bpe_merge), TRN_KIND_RUNTIME);
    if (!tok->merges) return TRN_ERR_NOMEM;
    tok->merges_cap = cap;
    for (i = 0; i < cap; i++) tok->merges[i].left = -1;
    return TRN_OK;
}

/* the next merge (rank n_merges): sides l[0..ln) and rr[0..rn) as written
   in the file (UTF-8, through byte_of). `where` names the place for errors */
static trn_result trn__bpe_add_merge(trn_tokenizer *tok, const int *byte_of, const char *l, size_t ln,
                                     const char *rr, size_t rn, trn__dbuf *a, trn__dbuf *both, const char *where) {
    trn_result r;
    size_t mask = tok->merges_cap - 1, h;
    int left, right, id;
    left = trn__bpe_merge_side(tok, byte_of, l, ln, a);
    if (left >= 0) { both->n = 0; if ((r = trn__dbuf_put(both, a->p, a->n)) != TRN_OK) return r; }
    right = left >= 0 ? trn__bpe_merge_side(tok, byte_of, rr, rn, a) : -1;
    if (left == -3 || right == -3) return TRN_ERR_NOMEM;
    if (left == -2 || right == -2) return trn_fail(TRN_ERR_FORMAT, "%s: invalid UTF-8", where);
    if (left < 0 || right < 0)
        return trn_fail(TRN_ERR_FORMAT, "%s: the %s token of \"%.*s %.*s\" is not in the vocabulary", where,
                        left < 0 ? "left" : "right", (int)TRN__MIN(ln, 40), l, (int)TRN__MIN(rn, 40), rr);
    if ((r = trn__dbuf_put(both, a->p, a->n)) != TRN_OK) return r;
    id = trn_tokenizer_find(tok, both->p, both->n);
    if (id < 0)
        return trn_fail(TRN_ERR_FORMAT, "%s: the merged token of \"%.*s %.*s\" is not in the vocabulary", where,
                        (int)TRN__MIN(ln, 40), l, (int)TRN__MIN(rn, 40), rr);
    if ((size_t)tok->n_merges + 1 >= tok->merges_cap / 4)
        return trn_fail(TRN_ERR_FORMAT, "%s: more merges than counted", where);
    h = (size_t)trn__mix64(((uint64_t)(uint32_t)left << 32) | (uint32_t)right) & mask;
    while (tok->merges[h].left >= 0 && !(tok->merges[h].left == left && tok->merges[h].right == right))
        h = (h + 1) & mask;
    if (tok->merges[h].left >= 0) return TRN_OK; /* listed twice: the first (better) rank stays */
    tok->merges[h].left = left;
    tok->merges[h].right = right;
    tok->merges[h].rank = tok->n_merges++;
    tok->merges[h].id = id;
    return TRN_OK;
}

static trn_result trn__bpe_read_merges(trn_tokenizer *tok, const char *path, const int *byte_of) {
    trn__dbuf file = {NULL, 0, 0, TRN_KIND_TEMP};
    trn__dbuf a = {NULL, 0, 0, TRN_KIND_TEMP}, both = {NULL, 0, 0, TRN_KIND_TEMP};
    trn_result r;
    size_t lines = 0, i, pos;
    int line_no = 0;
    if ((r = trn__data_slurp(&file, path, NULL)) != TRN_OK) return r;
    for (i = 0; i < file.n; i++) lines += file.p[i] == '\n';
    if ((r = trn__bpe_merges_alloc(tok, lines + 1)) != TRN_OK) goto done;
    pos = file.n >= 3 && memcmp(file.p, "\xEF\xBB\xBF", 3) == 0 ? 3 : 0; /* skip a byte order mark */
    for (; pos < file.n;) {
        const char *line = file.p + pos, *sp;
        size_t n = 0;
        char where[4096 + 32];
        while (pos + n < file.n && line[n] != '\n') n++;
        pos += n + 1;
        line_no++;
        if (n && line[n - 1] == '\r') n--;
        if (n == 0) continue;
        if (line_no == 1 && n >= 8 && memcmp(line, "#version", 8) == 0) continue;
        sp = (const char *)memchr(line, ' ', n);
        if (!sp || sp == line || sp == line + n - 1 || memchr(sp + 1, ' ', (size_t)(line + n - sp - 1))) {
            r = trn_fail(TRN_ERR_FORMAT, "%s line %d: expected two tokens separated by one space", path,
                         line_no);
            goto done;
        }
        snprintf(where, sizeof where, "%s line %d", path, line_no);
        r = trn__bpe_add_merge(tok, byte_of, line, (size_t)(sp - line), sp + 1, (size_t)(line + n - sp - 1), &a,
                               &both, where);
        if (r != TRN_OK) goto done;
    }
done:
    trn_free(file.p); trn_free(a.p); trn_free(both.p);
    return r;
}

TRNDEF trn_result trn_tokenizer_load_bpe(trn_tokenizer *tok, const char *vocab_json_path,
                                         const char *merges_txt_path) {
    int byte_of[256 + 68];
    trn_result r;
    uint32_t c;
    int b;
    if (!tok || !vocab_json_path || !merges_txt_path)
        return trn_fail(TRN_ERR_INVALID, "trn_tokenizer_load_bpe: NULL argument");
    trn_tokenizer_init_bytes(tok);
    tok->kind = TRN_TOKENIZER_BPE;
    tok->vocab_size = 0;
    for (c = 0; c < 256 + 68; c++) byte_of[c] = trn__bpe_byte_of(c);
    if ((r = trn__bpe_read_vocab(tok, vocab_json_path, byte_of)) != TRN_OK) goto fail;
    if ((r = trn__bpe_build_lookup(tok, vocab_json_path)) != TRN_OK) goto fail;
    for (b = 0; b < 256; b++) {
        char ch = (char)b;
        if ((tok->byte_id[b] = trn_tokenizer_find(tok, &ch, 1)) < 0) {
            r = trn_fail(TRN_ERR_FORMAT, "%s: no token for byte 0x%02X (a byte-level vocabulary has "
                         "all 256)", vocab_json_path, b);
            goto fail;
        }
    }
    tok->eot_id = trn_tokenizer_find(tok, "<|endoftext|>", 13);
    if ((r = trn__bpe_read_merges(tok, merges_txt_path, byte_of)) != TRN_OK) goto fail;
    return TRN_OK;
fail:
    trn_tokenizer_free(tok);
    return r;
}

TRNDEF trn_result trn_tokenizer_load_bpe_dir(trn_tokenizer *tok, const char *dir) {
    char vocab[4096], merges[4096];
    if (!tok || !dir) return trn_fail(TRN_ERR_INVALID, "trn_tokenizer_load_bpe_dir: NULL argument");
    if ((size_t)snprintf(vocab, sizeof vocab, "%s/vocab.json", dir) >= sizeof vocab ||
        (size_t)snprintf(merges, sizeof merges, "%s/merges.txt", dir) >= sizeof merges)
        return trn_fail(TRN_ERR_INVALID, "tokenizer directory name too long");
    return trn_tokenizer_load_bpe(tok, vocab, merges);
}

/* ---- GPT-2 BPE: encoding and decoding ---------------------------------- */
/* a candidate merge of the symbols at pos and the one after it */
typedef struct trn__bpe_cand {
    uint64_t key;              /* rank << 32 | pos: lowest rank, then leftmost */
    int left, right, id;       /* the pair, and the token it merges into       */
} trn__bpe_cand;

static int trn__bpe_cand_less(const trn__bpe_cand *a, const trn__bpe_cand *b) { return a->key < b->key; }

/* a 4-ary min-heap: children of i are 4i+1 .. 4i+4 (half the depth of a
   binary heap; the four keys of a node's children share a cache line or two) */
static void trn__bpe_heap_push(trn__bpe_cand *h, int *n, trn__bpe_cand c) {
    int i = (*n)++;
    while (i > 0 && trn__bpe_cand_less(&c, &h[(i - 1) / 4])) { h[i] = h[(i - 1) / 4]; i = (i - 1) / 4; }
    h[i] = c;
}

/* move h[i] down to its place in the heap h[0..n) */
static void trn__bpe_sift(trn__bpe_cand *h, int n, int i) {
    trn__bpe_cand x = h[i];
    for (;;) {
        int k = 4 * i + 1, best = k, j;
        if (k >= n) break;
        for (j = k + 1; j < k + 4 && j < n; j++) if (trn__bpe_cand_less(&h[j], &h[best])) best = j;
        if (!trn__bpe_cand_less(&h[best], &x)) break;
        h[i] = h[best];
        i = best;
    }
    h[i] = x;
}

static trn__bpe_cand trn__bpe_heap_pop(trn__bpe_cand *h, int *n) {
    trn__bpe_cand top = h[0];
    if (--(*n) > 0) { h[0] = h[*n]; trn__bpe_sift(h, *n, 0); }
    return top;
}

/* scratch for one piece: symbol ids, links, and the candidate heap */
typedef struct trn__bpe_work {
    int *id, *prev, *next; trn__bpe_cand *heap; size_t cap;
    int heapify;               /* 1: trn__bpe_try appends, heapified later */
} trn__bpe_work;

static void trn__bpe_try(const trn_tokenizer *tok, trn__bpe_work *w, int *n_heap, int pos) {
    const trn_bpe_merge *m;
    int nx;
    if (pos < 0 || (nx = w->next[pos]) < 0) return;
    m = trn__bpe_merge_find(tok, w->id[pos], w->id[nx]);
    if (m) {
        trn__bpe_cand c;
        c.key = (uint64_t)(uint32_t)m->rank << 32 | (uint32_t)pos;
        c.left = m->left; c.right = m->right; c.id = m->id;
        if (w->heapify) w->heap[(*n_heap)++] = c;
        else trn__bpe_heap_push(w->heap, n_heap, c);
    }
}

/* Byte-pair merging of one piece s[0..n) into out. GPT-2's reference
   repeatedly finds the lowest-ranked adjacent pair and merges all its
   occurrences left to right. Here every adjacent pair that has a rank sits
   in a min-heap keyed (rank, position); popping merges one occurrence and
   pushes the two new neighbouring pairs; entries whose symbols changed
   since they were pushed are skipped. Same result as the reference for
   merges learned by BPE (a merge's parts always rank better than the
   merge itself), in O(n log n) instead of O(n^2) for long pieces. */
static trn_result trn__bpe_reserve(trn__bpe_work *w, size_t n) {
    if (n > w->cap) {
        size_t cap = TRN__MAX(n, 2 * w->cap);
        if (cap > (size_t)INT_MAX / 4)
            return trn_fail(TRN_ERR_NOMEM, "bpe: a piece of %zu bytes is too long", n);
        trn_free(w->id); trn_free(w->prev); trn_free(w->next); trn_free(w->heap);
        w->id = (int *)trn_alloc(cap * sizeof(int), TRN_KIND_TEMP);
        w->prev = (int *)trn_alloc(cap * sizeof(int), TRN_KIND_TEMP);
        w->next = (int *)trn_alloc(cap * sizeof(int), TRN_KIND_TEMP);
        w->heap = (trn__bpe_cand *)trn_alloc(3 * cap * sizeof(trn__bpe_cand), TRN_KIND_TEMP);
        w->cap = cap;
        if (!w->id || !w->prev || !w->next || !w->heap) { w->cap = 0; return TRN_ERR_NOMEM; }
    }
    return TRN_OK;
}

/* merge the n >= 1 symbols w->id[0..n) (reserved) and append the result */
static trn_result trn__bpe_merge_run(const trn_tokenizer *tok, trn__bpe_work *w, int n, trn_tokens *out) {
    int i, n_heap = 0;
    trn_result r;
    w->heapify = 1;
    for (i = 0; i < n; i++) {
        w->prev[i] = i - 1;
        w->next[i] = i + 1 < n ? i + 1 : -1;
    }
    for (i = 0; i + 1 < n; i++) trn__bpe_try(tok, w, &n_heap, i);
    if (n_heap > 1) /* heapify: O(n), from the last parent up */
        for (i = (n_heap - 2) / 4; i >= 0; i--) trn__bpe_sift(w->heap, n_heap, i);
    w->heapify = 0;
    while (n_heap > 0) {
        trn__bpe_cand c = trn__bpe_heap_pop(w->heap, &n_heap);
        int pos = (int)(uint32_t)c.key, nx = w->next[pos];
        if (w->id[pos] != c.left || nx < 0 || w->id[nx] != c.right) continue; /* stale */
        w->id[pos] = c.id;          /* the left symbol becomes the merged one */
        w->id[nx] = -1;             /* the right one leaves the list          */
        w->next[pos] = w->next[nx];
        if (w->next[nx] >= 0) w->prev[w->next[nx]] = pos;
        trn__bpe_try(tok, w, &n_heap, w->prev[pos]);
        trn__bpe_try(tok, w, &n_heap, pos);
    }
    if ((r = trn__tokens_reserve(out, (size_t)n)) != TRN_OK) return r;
    for (i = 0; i >= 0; i = w->next[i]) out->ids[out->n++] = w->id[i];
    return TRN_OK;
}

static trn_result trn__bpe_piece(const trn_tokenizer *tok, trn__bpe_work *w, const unsigned char *s,
                                 size_t n, trn_tokens *out) {
    trn_result r;
    size_t i;
    if ((r = trn__bpe_reserve(w, n)) != TRN_OK) return r;
    for (i = 0; i < n; i++) w->id[i] = tok->byte_id[s[i]];
    return trn__bpe_merge_run(tok, w, (int)n, out);
}

TRNDEF trn_result trn_tokenizer_encode(const trn_tokenizer *tok, const char *text, size_t len,
                                       trn_tokens *out) {
    trn__bpe_work w;
    trn_result r = TRN_OK;
    size_t pos, i;
    if (!tok || !out || (!text && len))
        return trn_fail(TRN_ERR_INVALID, "trn_tokenizer_encode: NULL argument");
    if (tok->kind == TRN_TOKENIZER_BYTES) {
        if ((r = trn__tokens_reserve(out, len)) != TRN_OK) return r;
        for (i = 0; i < len; i++) out->ids[out->n++] = (unsigned char)text[i];
        return TRN_OK;
    }
    if (tok->kind == TRN_TOKENIZER_HF) return trn_tokenizer_encode_ex(tok, text, len, 0, out);
    if (!tok->merges) return trn_fail(TRN_ERR_INVALID, "trn_tokenizer_encode: tokenizer not loaded");
    memset(&w, 0, sizeof w);
    for (pos = 0; pos < len && r == TRN_OK;) {
        size_t n = trn_bpe_pretoken_len(text + pos, len - pos);
        r = trn__bpe_piece(tok, &w, (const unsigned char *)text + pos, n, out);
        pos += n;
    }
    trn_free(w.id); trn_free(w.prev); trn_free(w.next); trn_free(w.heap);
    return r;
}

static const unsigned char trn__byte_values[256] = {
#define TRN__B16(x) x, x + 1, x + 2, x + 3, x + 4, x + 5, x + 6, x + 7, x + 8, x + 9, x + 10, x + 11, \
                    x + 12, x + 13, x + 14, x + 15
    TRN__B16(0), TRN__B16(16), TRN__B16(32), TRN__B16(48), TRN__B16(64), TRN__B16(80),
    TRN__B16(96), TRN__B16(112), TRN__B16(128), TRN__B16(144), TRN__B16(160), TRN__B16(176),
    TRN__B16(192), TRN__B16(208), TRN__B16(224), TRN__B16(240)
#undef TRN__B16
};

TRNDEF const char *trn_tokenizer_token(const trn_tokenizer *tok, int id, size_t *len) {
    size_t dummy;
    if (!len) len = &dummy;
    *len = 0;
    if (!tok || id < 0 || id >= tok->vocab_size) return NULL;
    if (tok->kind == TRN_TOKENIZER_BYTES) { *len = 1; return (const char *)&trn__byte_values[id]; }
    if (tok->dec) { /* tokenizer.json: what the decoder makes of it */
        if (tok->dec_len[id] == UINT32_MAX) return NULL;
        *len = tok->dec_len[id];
        return tok->dec + tok->dec_off[id];
    }
    if (tok->len[id] == UINT32_MAX) return NULL;
    *len = tok->len[id];
    return tok->bytes + tok->off[id];
}

TRNDEF size_t trn_tokenizer_decode(const trn_tokenizer *tok, const int *ids, size_t n, char *buf,
                                   size_t cap) {
    size_t total = 0, i, k;
    int stripped = 0;
    if (!buf) cap = 0;
    for (i = 0; i < n && ids; i++) {
        size_t len;
        const char *s = trn_tokenizer_token(tok, ids[i], &len);
        if (s && len && !stripped && tok->strip_space == 1) { /* Strip(" ", 1, 0) after Fuse */
            stripped = 1;
            if (s[0] == ' ') { s++; len--; }
        }
        if (s && i == 0 && tok->strip_space == 2) { /* Metaspace's decoder: no "▁" of token 0 is a space */
            const char *raw = NULL;
            size_t rn = 0;
            int b, byte = 0;
            for (b = 0; b < 256; b++) byte |= tok->byte_token[b] == ids[0];
            if (tok->len[ids[0]] != UINT32_MAX) { raw = tok->bytes + tok->off[ids[0]]; rn = tok->len[ids[0]]; }
            for (b = 0; b < tok->n_added && !raw; b++)
                if (tok->added[b].id == ids[0]) { raw = tok->added_text + tok->added[b].poff; rn = tok->added[b].plen; }
            for (k = 0; k < rn && !byte; k++) {
                if (k + 3 <= rn && memcmp(raw + k, "\xE2\x96\x81", 3) == 0) { k += 2; continue; }
                if (total < cap) buf[total] = raw[k];
                total++;
            }
            if (!byte) continue;
        }
        if (s && total < cap) memcpy(buf + total, s, TRN__MIN(len, cap - total));
        total += len;
    }
    if (cap > 0) buf[TRN__MIN(total, cap - 1)] = 0;
    return total;
}

/* ---- Hugging Face tokenizer.json: pre-tokenizer scanners ---------------- */
enum { /* pre-tokenizer stages, run in order on each piece */
    TRN__PT_PREFIX = 1, /* ByteLevel add_prefix_space: " " before a piece that has none */
    TRN__PT_GPT2,       /* GPT-2's regex (ByteLevel use_regex, or Split with it)      */
    TRN__PT_LLAMA3,     /* Llama 3's regex (digits in runs of 1..3)                   */
    TRN__PT_QWEN2,      /* Qwen2's regex (Llama 3's with single digits)               */
    TRN__PT_DIGITS,     /* Digits: runs of digits isolated                            */
    TRN__PT_DIGIT1,     /* Digits individual_digits: each digit isolated              */
    TRN__PT_META,       /* Metaspace: " " -> "▁", prepend per meta_prepend            */
    TRN__PT_META_SPLIT  /* Metaspace split: and cut before each "▁"                   */
};

/* The split patterns recognized, exactly as tokenizer.json writes them
   (JSON-decoded). Any other pattern is refused with its text. */
static const char trn__re_gpt2[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
static const char trn__re_llama3[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char trn__re_qwen2[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

/* Llama 3's pattern (max_digits 3) and Qwen2's (1), one piece at a time:
   the length (>= 1) of the piece at s[0], len >= 1. The alternatives are
   tried in order, as the regex engine does:
     1. (?i:'s|'t|'re|'ve|'m|'ll|'d)   contractions, any case; (?i)
                                       folds U+017F LONG S to s, so "'ſ"
                                       is one too (no other character
                                       folds to one of these letters)
     2. [^\r\n\p{L}\p{N}]?\p{L}+       letters, with one leading character
                                       that is no letter, digit or newline
     3. \p{N}{1,max_digits}            digits
     4.  ?[^\s\p{L}\p{N}]+[\r\n]*      other characters, then newlines
     5. \s*[\r\n]+                     whitespace up to its last newline
     6. \s+(?!\S)                      whitespace but the last character
                                       before a non-space
     7. \s+                            whitespace */
static size_t trn__l3_pretoken_len(const unsigned char *s, size_t len, int max_digits) {
    size_t w, w2, end, last_nl = 0, last_start = 0;
    int c, k, any_nl = 0;
    uint32_t cp;
    if (s[0] == '\'' && len >= 2) {
        int a = s[1] | 0x20, b = len >= 3 ? s[2] | 0x20 : 0;
        if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
        if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
        if (len >= 3 && s[1] == 0xC5 && s[2] == 0xBF) return 3; /* "'" + U+017F LONG S */
    }
    w = trn__utf8_decode(s, len, &cp);
    c = trn__char_class(cp);
    if (c == TRN__CH_LETTER || (c != TRN__CH_NUMBER && cp != '\r' && cp != '\n' && w < len &&
                                trn__class_at(s, len, w, &w2) == TRN__CH_LETTER)) {
        end = c == TRN__CH_LETTER ? 0 : w;
        while (end < len && trn__class_at(s, len, end, &w2) == TRN__CH_LETTER) end += w2;
        return end;
    }
    if (c == TRN__CH_NUMBER) {
        for (end = w, k = 1; k < max_digits && end < len && trn__class_at(s, len, end, &w2) == TRN__CH_NUMBER; k++)
            end += w2;
        return end;
    }
    end = (s[0] == ' ' && len > 1) ? 1 : 0;
    if (trn__class_at(s, len, end, &w2) == TRN__CH_OTHER) {
        while (end < len && trn__class_at(s, len, end, &w2) == TRN__CH_OTHER) end += w2;
        while (end < len && (s[end] == '\r' || s[end] == '\n')) end++;
        return end;
    }
    /* s[0] is whitespace: rules 5, 6, 7 over the run s[0..end) */
    end = 0;
    while (end < len && trn__class_at(s, len, end, &w2) == TRN__CH_SPACE) {
        if (s[end] == '\r' || s[end] == '\n') { last_nl = end; any_nl = 1; }
        last_start = end;
        end += w2;
    }
    if (any_nl) return last_nl + 1;
    if (end == len || last_start == 0) return end;
    return last_start;
}

/* Digits: a run of digits (or one digit), or the run of non-digits before one */
static size_t trn__digits_len(const unsigned char *s, size_t len, int individual) {
    size_t w, end = 0;
    int d = trn__class_at(s, len, 0, &w) == TRN__CH_NUMBER;
    if (d && individual) return w;
    while (end < len && (trn__class_at(s, len, end, &w) == TRN__CH_NUMBER) == d) end += w;
    return end;
}

/* ---- Unicode NFC (the normalizer of Qwen2's tokenizer.json) -------------
   NFC = canonical decomposition, then canonical ordering, then canonical
   composition (Unicode's UAX #15). "e\u0301" (e + combining acute) and
   "é" become the same "é"; U+212B ANGSTROM SIGN becomes U+00C5; marks
   around a letter come out in one order. Steps, on one piece of text:
   1. decompose every character fully: Hangul syllables by arithmetic
      (S = 0xAC00 + (L*21 + V)*28 + T), the others by trn__nfc_dec,
      recursively (U+1E69 -> U+1E63 U+0307 -> s U+0323 U+0307);
   2. reorder: within each run of marks with class != 0, a stable sort by
      canonical combining class (U+0307 class 230 goes after U+0323 220);
   3. compose: each character joins the last starter (class 0) before it
      when that pair is a primary composite (trn__nfc_comp) and nothing
      between them blocks it (a character of class 0, or of a class >= its
      own); Hangul L+V and LV+T compose by arithmetic.
   Composition exclusions (U+0958 DEVANAGARI QA, U+2ADC ...) and
   singletons (U+212B -> U+00C5) decompose but never compose back, which is
   why trn__nfc_comp lists only some of the decompositions.
   The tables are extras/train_unicode.h, generated by
   tools/gen_unicode_nfc.py from Python's unicodedata (Unicode 14.0). Bytes
   that are not UTF-8 pass through unchanged and block nothing after them
   from composing with what comes before (they act as starters).
   Quick check: most text is NFC already. A piece whose bytes are all below
   0xCC (ASCII, and every character below U+0300: Latin-1, Latin Extended)
   is returned as it is without decoding; otherwise only characters in a
   32-code-point block that holds a mark or a non-NFC character are looked
   up (not CJK, not most of any script), and only the stretches around a
   character that is not NFC_Quick_Check=Yes or marks out of class order
   are normalized (trn__nfc_text). */
#include "train_unicode.h"

#define TRN__NFC_RAW 0x110000u /* + b: the byte b that is not UTF-8 */

/* canonical combining class (0 for most characters and for raw bytes) */
static int trn__nfc_class(uint32_t cp) {
    size_t lo = 0, hi = sizeof trn__nfc_ccc / sizeof trn__nfc_ccc[0];
    if (cp < 0x300 || cp >= 0x110000 || !(trn__nfc_block[cp >> 10] >> ((cp >> 5) & 31) & 1)) return 0;
    while (lo < hi) { /* binary search on the code point (the top 24 bits) */
        size_t mid = (lo + hi) / 2;
        uint32_t c = trn__nfc_ccc[mid] >> 8;
        if (c == cp) return (int)(trn__nfc_ccc[mid] & 0xFF);
        if (c < cp) lo = mid + 1; else hi = mid;
    }
    return 0;
}

/* is cp NFC_Quick_Check No or Maybe (may change, or may compose)? */
static int trn__nfc_not_yes(uint32_t cp) {
    size_t lo = 0, hi = sizeof trn__nfc_qc / sizeof trn__nfc_qc[0];
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < trn__nfc_qc[mid][0]) hi = mid;
        else if (cp > trn__nfc_qc[mid][1]) lo = mid + 1;
        else return 1;
    }
    return 0;
}

/* the one-level decomposition of cp: its index in trn__nfc_dec, or -1 */
static int trn__nfc_dec_find(uint32_t cp) {
    int lo = 0, hi = (int)(sizeof trn__nfc_dec / sizeof trn__nfc_dec[0]);
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (trn__nfc_dec[mid][0] == cp) return mid;
        if (trn__nfc_dec[mid][0] < cp) lo = mid + 1; else hi = mid;
    }
    return -1;
}

/* step 1: the full canonical decomposition of cp appended to out[*n..]
   (at most 4 code points per character in Unicode 14; room for 8 made) */
static void trn__nfc_decompose(uint32_t cp, uint32_t *out, size_t *n) {
    int k;
    if (cp >= 0xAC00 && cp < 0xAC00 + 11172) { /* Hangul syllable: L V (T) */
        uint32_t s = cp - 0xAC00;
        out[(*n)++] = 0x1100 + s / (21 * 28);
        out[(*n)++] = 0x1161 + (s % (21 * 28)) / 28;
        if (s % 28) out[(*n)++] = 0x11A7 + s % 28;
        return;
    }
    if (cp < 0xC0 || (k = trn__nfc_dec_find(cp)) < 0) { out[(*n)++] = cp; return; }
    trn__nfc_decompose(trn__nfc_dec[k][1], out, n);
    if (trn__nfc_dec[k][2]) trn__nfc_decompose(trn__nfc_dec[k][2], out, n);
}

/* step 3's table: the primary composite of (a, b), or 0 */
static uint32_t trn__nfc_compose(uint32_t a, uint32_t b) {
    int lo = 0, hi = (int)(sizeof trn__nfc_comp / sizeof trn__nfc_comp[0]);
    if (a >= 0x1100 && a < 0x1100 + 19 && b >= 0x1161 && b < 0x1161 + 21) /* L + V */
        return 0xAC00 + ((a - 0x1100) * 21 + (b - 0x1161)) * 28;
    if (a >= 0xAC00 && a < 0xAC00 + 11172 && (a - 0xAC00) % 28 == 0 && b > 0x11A7 && b < 0x11A7 + 28) /* LV + T */
        return a + (b - 0x11A7);
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        const uint32_t *d = trn__nfc_dec[trn__nfc_comp[mid]];
        if (d[1] == a && d[2] == b) return d[0];
        if (d[1] < a || (d[1] == a && d[2] < b)) lo = mid + 1; else hi = mid;
    }
    return 0;
}

/* NFC of s[0..n) into out (out->n = its length); cps: code point scratch */
static trn_result trn__nfc(trn__dbuf *out, trn__dbuf *cps, const unsigned char *s, size_t n) {
    trn_result r;
    uint32_t *c, cp, starter = 0;
    size_t i, w, m = 0, j, k, sp = 0;
    int last, cl;
    char u[4];
    out->n = 0;
    if (n > ((size_t)-1 / 4 - 64) / 32) return trn_fail(TRN_ERR_NOMEM, "NFC: %zu bytes is too many", n);
    cps->n = 0; /* a character of w bytes decomposes into at most 4 code points (<= 2w of them) */
    if ((r = trn__dbuf_reserve(cps, 4 * (2 * n + 8))) != TRN_OK) return r;
    c = (uint32_t *)(void *)cps->p;
    for (i = 0; i < n; i += w) { /* 1. decompose */
        w = trn__utf8_decode(s + i, n - i, &cp);
        if (cp == TRN__NO_CHAR) c[m++] = TRN__NFC_RAW + s[i];
        else trn__nfc_decompose(cp, c, &m);
    }
    for (i = 1; i < m; i++) { /* 2. reorder: insertion sort of each run of marks */
        cl = trn__nfc_class(c[i]);
        if (cl == 0) continue;
        for (j = i; j > 0 && trn__nfc_class(c[j - 1]) > cl; j--) {
            uint32_t t = c[j]; c[j] = c[j - 1]; c[j - 1] = t;
        }
    }
    /* 3. compose in place: k characters kept so far, c[sp] the last starter
       (none while the text starts with marks: last = 256 then) */
    last = m > 0 && trn__nfc_class(c[0]) != 0 ? 256 : 0;
    if (m > 0) starter = c[0];
    for (i = 1, k = m > 0; i < m; i++) {
        uint32_t x;
        cl = trn__nfc_class(c[i]);
        if ((last < cl || last == 0) && (x = trn__nfc_compose(starter, c[i])) != 0) {
            c[sp] = starter = x; /* joins the starter; `last` stays what it was */
            continue;
        }
        if (cl == 0) { sp = k; starter = c[i]; }
        last = cl;
        c[k++] = c[i];
    }
    for (i = 0; i < k; i++) { /* back to UTF-8 */
        if (c[i] >= TRN__NFC_RAW) u[0] = (char)(c[i] - TRN__NFC_RAW), w = 1;
        else w = trn__utf8_encode(c[i], u);
        if ((r = trn__dbuf_put(out, u, w)) != TRN_OK) return r;
    }
    return TRN_OK;
}

/* NFC of s[0..n) the quick way: 0 when s is NFC already (out untouched),
   1 with the NFC in out. The text is cut before every "stable" character
   (class 0 and NFC_Quick_Check=Yes: nothing before it can change it or
   what follows; tools/gen_unicode_nfc.py asserts this of the tables):
   only the stretches that hold a character that is not Yes or marks out of
   class order go through trn__nfc, the rest is copied. */
static trn_result trn__nfc_text(trn__dbuf *out, trn__dbuf *cps, trn__dbuf *tmp, const unsigned char *s, size_t n,
                                int *changed) {
    trn_result r;
    size_t i = 0, w, cut = 0, done = 0;
    int last = 0, c, need = 0;
    uint32_t cp;
    *changed = 0;
    while (i < n && s[i] < 0xCC) i++; /* nothing below U+0300 changes */
    if (i == n) return TRN_OK;        /* (a byte >= 0xCC starts a character) */
    for (cut = i; cut > 0 && (s[cut - 1] & 0xC0) == 0x80; cut--) {} /* the stretch starts with the */
    if (cut > 0) cut--;                                              /* character before s[i]      */
    for (; i <= n; i += w) {
        w = 1;
        if (i < n && (s[i] & 0xC0) == 0x80) continue; /* inside a character: no cut here */
        if (i < n && s[i] >= 0xCC) {
            w = trn__utf8_decode(s + i, n - i, &cp);
            if (cp != TRN__NO_CHAR && (trn__nfc_block[cp >> 10] >> ((cp >> 5) & 31) & 1)) {
                int no = trn__nfc_not_yes(cp);
                c = trn__nfc_class(cp);
                if (c != 0 || no) { /* not stable: a mark, or may change */
                    if (no || last > c) need = 1;
                    last = c;
                    continue;
                }
            }
        }
        /* s[i] starts a stable character (or i == n) */
        if (need) { /* normalize s[cut..i): copy what came before it first */
            if (!*changed) out->n = 0;
            *changed = 1;
            if ((r = trn__dbuf_put(out, s + done, cut - done)) != TRN_OK ||
                (r = trn__nfc(tmp, cps, s + cut, i - cut)) != TRN_OK || (r = trn__dbuf_put(out, tmp->p, tmp->n)) != TRN_OK)
                return r;
            done = i;
            need = 0;
        }
        cut = i;
        last = 0;
        if (i < n && s[i] < 0xCC) { /* more characters below U+0300: cut before the last of them */
            size_t j = i + 1;
            while (j < n && s[j] < 0xCC) j++;
            for (cut = j; cut > i && (s[cut - 1] & 0xC0) == 0x80; cut--) {}
            if (cut > i) cut--;
            w = j - i;
        }
    }
    if (*changed) return trn__dbuf_put(out, s + done, n - done);
    return TRN_OK;
}

/* ---- Hugging Face tokenizer.json: encoding ------------------------------- */
typedef struct trn__hf_enc {
    const trn_tokenizer *tok;
    trn__bpe_work w;
    trn__dbuf buf[11];  /* one scratch per stage (prefix, metaspace), 7: the
                           metaspace normalizer, 8..10: NFC (text, code points, a stretch) */
    trn_tokens *out;
    int flags;
} trn__hf_enc;

/* append s[0..n) to b with every " " as "▁" (after one "▁" with prepend) */
static trn_result trn__meta_replace(trn__dbuf *b, const unsigned char *s, size_t n, int prepend) {
    size_t i;
    char *o;
    if (n > (size_t)-1 / 8 || trn__dbuf_reserve(b, 3 * n + 3) != TRN_OK) return TRN_ERR_NOMEM;
    o = b->p + b->n;
    if (prepend) { memcpy(o, "\xE2\x96\x81", 3); o += 3; }
    for (i = 0; i < n; i++) {
        if (s[i] == ' ') { memcpy(o, "\xE2\x96\x81", 3); o += 3; }
        else *o++ = (char)s[i];
    }
    b->n = (size_t)(o - b->p);
    b->p[b->n] = 0;
    return TRN_OK;
}

/* BPE on one pre-token s[0..n), n >= 1 */
static trn_result trn__hf_bpe(trn__hf_enc *e, const unsigned char *s, size_t n) {
    const trn_tokenizer *tok = e->tok;
    trn_result r;
    size_t i, w;
    int k = 0, id, last_unk = 0;
    if (tok->ignore_merges && (id = trn_tokenizer_find(tok, (const char *)s, n)) >= 0)
        return trn_tokens_append(e->out, &id, 1);
    if ((r = trn__bpe_reserve(&e->w, n)) != TRN_OK) return r;
    if (tok->byte_level) {
        for (i = 0; i < n; i++) e->w.id[i] = tok->byte_id[s[i]];
        return trn__bpe_merge_run(tok, &e->w, (int)n, e->out);
    }
    for (i = 0; i < n; i += w) { /* one symbol per character */
        uint32_t cp;
        size_t b;
        w = trn__utf8_decode(s + i, n - i, &cp);
        id = w == 1 && s[i] < 0x80 ? tok->byte_id[s[i]] : trn_tokenizer_find(tok, (const char *)s + i, w);
        if (id >= 0) { e->w.id[k++] = id; last_unk = 0; continue; }
        if (tok->byte_fallback) {
            for (b = 0; b < w && tok->byte_token[s[i + b]] >= 0; b++) {}
            if (b == w) {
                for (b = 0; b < w; b++) e->w.id[k++] = tok->byte_token[s[i + b]];
                last_unk = 0;
                continue;
            }
        }
        if (tok->unk_id >= 0 && !(tok->fuse_unk && last_unk)) { e->w.id[k++] = tok->unk_id; last_unk = 1; }
        /* no unk_token: the character is dropped, as the package does */
    }
    if (k == 0) return TRN_OK;
    return trn__bpe_merge_run(tok, &e->w, k, e->out);
}

/* pre-tokenizer stage `st` on s[0..n); first: the piece starts the input */
static trn_result trn__hf_stage(trn__hf_enc *e, int st, const unsigned char *s, size_t n, int first) {
    const trn_tokenizer *tok = e->tok;
    trn_result r = TRN_OK;
    size_t pos, m;
    trn__dbuf *b;
    if (n == 0) return TRN_OK;
    if (st == tok->n_stages) return trn__hf_bpe(e, s, n);
    b = &e->buf[st];
    switch (tok->stage[st]) {
    case TRN__PT_PREFIX:
        if (s[0] == ' ') return trn__hf_stage(e, st + 1, s, n, first);
        b->n = 0;
        if ((r = trn__dbuf_put(b, " ", 1)) != TRN_OK || (r = trn__dbuf_put(b, s, n)) != TRN_OK) return r;
        return trn__hf_stage(e, st + 1, (const unsigned char *)b->p, b->n, first);
    case TRN__PT_META: case TRN__PT_META_SPLIT:
        b->n = 0;
        if (!(n >= 3 && memcmp(s, "\xE2\x96\x81", 3) == 0) && s[0] != ' ' &&
            (tok->meta_prepend == 1 || (tok->meta_prepend == 2 && first)))
            if ((r = trn__dbuf_put(b, "\xE2\x96\x81", 3)) != TRN_OK) return r;
        if ((r = trn__meta_replace(b, s, n, 0)) != TRN_OK) return r;
        if (tok->stage[st] == TRN__PT_META)
            return trn__hf_stage(e, st + 1, (const unsigned char *)b->p, b->n, first);
        for (m = 0, pos = 1; pos <= b->n; pos++) /* cut before each "▁" (MergedWithNext); m: piece start */
            if (pos == b->n || (pos + 3 <= b->n && memcmp(b->p + pos, "\xE2\x96\x81", 3) == 0)) {
                if ((r = trn__hf_stage(e, st + 1, (const unsigned char *)b->p + m, pos - m, first && m == 0)) != TRN_OK)
                    return r;
                m = pos;
            }
        return TRN_OK;
    default: break;
    }
    for (pos = 0; pos < n && r == TRN_OK; pos += m) { /* the splitting stages */
        switch (tok->stage[st]) {
        case TRN__PT_GPT2: m = trn_bpe_pretoken_len((const char *)s + pos, n - pos); break;
        case TRN__PT_LLAMA3: m = trn__l3_pretoken_len(s + pos, n - pos, 3); break;
        case TRN__PT_QWEN2: m = trn__l3_pretoken_len(s + pos, n - pos, 1); break;
        case TRN__PT_DIGITS: m = trn__digits_len(s + pos, n - pos, 0); break;
        default: m = trn__digits_len(s + pos, n - pos, 1); break;
        }
        r = trn__hf_stage(e, st + 1, s + pos, m, first && pos == 0);
    }
    return r;
}

/* the leftmost-longest added token at or after s[from..n) among those with
   normalized == norm (special ones skipped with TRN_ENCODE_NO_SPECIAL):
   its index, start in *at; -1 when none */
static int trn__hf_added_find(const trn_tokenizer *tok, const unsigned char *s, size_t n, size_t from, int norm,
                              int flags, size_t *at) {
    size_t i;
    for (i = from; i < n; i++) {
        int k, best = -1;
        uint32_t best_len = 0;
        for (k = tok->added_first[s[i]]; k < tok->added_first[s[i] + 1]; k++) {
            const trn_added_token *a = &tok->added[tok->added_by_byte[k]];
            if (a->normalized != norm || (a->special && (flags & TRN_ENCODE_NO_SPECIAL))) continue;
            if (a->plen > best_len && a->plen <= n - i && memcmp(s + i, tok->added_text + a->poff, a->plen) == 0) {
                best = tok->added_by_byte[k];
                best_len = a->plen;
            }
        }
        if (best >= 0) { *at = i; return best; }
    }
    return -1;
}

/* one piece between non-normalized added tokens: normalize, cut out the
   normalized added tokens, pre-tokenize and BPE the rest */
static trn_result trn__hf_segment(trn__hf_enc *e, const unsigned char *s, size_t n, int first) {
    const trn_tokenizer *tok = e->tok;
    trn__dbuf *b = &e->buf[7];
    trn_result r;
    size_t pos = 0, at;
    int k;
    if (n == 0) return TRN_OK;
    if (tok->nfc) { /* NFC (first, as the Sequence lists it) */
        int changed;
        if ((r = trn__nfc_text(&e->buf[8], &e->buf[9], &e->buf[10], s, n, &changed)) != TRN_OK) return r;
        if (changed) { s = (const unsigned char *)e->buf[8].p; n = e->buf[8].n; }
    }
    if (tok->meta_norm) { /* Prepend("▁") + Replace(" ", "▁") */
        b->n = 0;
        if ((r = trn__meta_replace(b, s, n, 1)) != TRN_OK) return r;
        s = (const unsigned char *)b->p;
        n = b->n;
    }
    while ((k = trn__hf_added_find(tok, s, n, pos, 1, e->flags, &at)) >= 0) {
        if ((r = trn__hf_stage(e, 0, s + pos, at - pos, first && pos == 0)) != TRN_OK) return r;
        if ((r = trn_tokens_append(e->out, &tok->added[k].id, 1)) != TRN_OK) return r;
        pos = at + tok->added[k].plen;
    }
    return trn__hf_stage(e, 0, s + pos, n - pos, first && pos == 0);
}

TRNDEF trn_result trn_tokenizer_encode_ex(const trn_tokenizer *tok, const char *text, size_t len, int flags,
                                          trn_tokens *out) {
    trn__hf_enc e;
    trn_result r = TRN_OK;
    const unsigned char *s = (const unsigned char *)text;
    size_t pos = 0, at;
    int k, i;
    if (!tok || !out || (!text && len))
        return trn_fail(TRN_ERR_INVALID, "trn_tokenizer_encode_ex: NULL argument");
    if (tok->kind != TRN_TOKENIZER_HF) return trn_tokenizer_encode(tok, text, len, out);
    if (!tok->merges) return trn_fail(TRN_ERR_INVALID, "trn_tokenizer_encode_ex: tokenizer not loaded");
    memset(&e, 0, sizeof e);
    e.tok = tok; e.out = out; e.flags = flags;
    for (i = 0; i < 11; i++) e.buf[i].kind = TRN_KIND_TEMP;
    if ((flags & TRN_ENCODE_BOS) && tok->bos_id >= 0) r = trn_tokens_append(out, &tok->bos_id, 1);
    while (r == TRN_OK && (k = trn__hf_added_find(tok, s, len, pos, 0, flags, &at)) >= 0) {
        if ((r = trn__hf_segment(&e, s + pos, at - pos, pos == 0)) != TRN_OK) break;
        r = trn_tokens_append(out, &tok->added[k].id, 1);
        pos = at + tok->added[k].plen;
    }
    if (r == TRN_OK) r = trn__hf_segment(&e, s + pos, len - pos, pos == 0);
    if (r == TRN_OK && (flags & TRN_ENCODE_BOS) && tok->eos_id >= 0) r = trn_tokens_append(out, &tok->eos_id, 1);
    trn_free(e.w.id); trn_free(e.w.prev); trn_free(e.w.next); trn_free(e.w.heap);
    for (i = 0; i < 11; i++) trn_free(e.buf[i].p);
    return r;
}

/* ---- Hugging Face tokenizer.json: loading -------------------------------- */
/* the JSON string at the cursor, decoded, into b (b->n = its length) */
static trn_result trn__hf_jstr(trn__jp *j, trn__dbuf *b) {
    trn_result r;
    uint32_t cp = 0;
    char u[4];
    b->n = 0;
    if ((r = trn__jopen(j)) != TRN_OK || (r = trn__dbuf_reserve(b, 0)) != TRN_OK) return r;
    for (;;) {
        if ((r = trn__jchar(j, &cp)) != TRN_OK) return r;
        if (cp == TRN__JSTR_END) return TRN_OK;
        if ((r = trn__dbuf_put(b, u, trn__utf8_encode(cp, u))) != TRN_OK) return r;
    }
}

static int trn__hf_absent(trn_json_value v) {
    trn_json_type t = trn_json_typeof(v);
    return t == TRN_JSON_NONE || t == TRN_JSON_NULL;
}

/* obj["type"] into buf; refuses a value that is not an object with one */
static trn_result trn__hf_type(trn_json_value v, const char *what, char *buf, size_t cap) {
    if (trn_json_typeof(v) != TRN_JSON_OBJECT)
        return trn_fail(TRN_ERR_FORMAT, "%s: %s is not an object", v.doc->name, what);
    return trn_json_string(trn_json_key(v, "type"), buf, cap);
}

/* an optional boolean member (absent or null: dflt) */
static trn_result trn__hf_bool(trn_json_value obj, const char *key, int dflt, int *out) {
    trn_json_value v = trn_json_key(obj, key);
    *out = dflt;
    return trn__hf_absent(v) && !v.twice ? TRN_OK : trn_json_bool(v, out);
}

/* is obj[key] the string want? */
static int trn__hf_str_is(trn_json_value obj, const char *key, const char *want) {
    char buf[64];
    return trn_json_string(trn_json_key(obj, key), buf, sizeof buf) == TRN_OK && strcmp(buf, want) == 0;
}

static trn_result trn__hf_unsupported(const char *path, const char *what, const char *name, const char *hint) {
    return trn_fail(TRN_ERR_FORMAT, "%s: %s \"%s\" is not implemented%s%s", path, what, name, hint[0] ? " " : "",
                    hint);
}

static trn_result trn__hf_pre(trn_tokenizer *tok, trn_json_value v, int depth, const char *path) {
    char type[64], pat[512];
    trn_result r;
    int i, n, flag;
    if (trn__hf_absent(v)) return TRN_OK;
    if ((r = trn__hf_type(v, "pre_tokenizer", type, sizeof type)) != TRN_OK) return r;
    if (!strcmp(type, "Sequence") && depth < 4) {
        trn_json_value list = trn_json_key(v, "pretokenizers");
        if (trn_json_typeof(list) != TRN_JSON_ARRAY)
            return trn_fail(TRN_ERR_FORMAT, "%s: pre_tokenizer Sequence without a 'pretokenizers' list", path);
        for (i = 0, n = trn_json_count(list); i < n; i++)
            if ((r = trn__hf_pre(tok, trn_json_at(list, i), depth + 1, path)) != TRN_OK) return r;
        return TRN_OK;
    }
    if (tok->n_stages + 2 > (int)(sizeof tok->stage / sizeof tok->stage[0]))
        return trn_fail(TRN_ERR_FORMAT, "%s: more than %d pre-tokenizer steps", path, 4);
    if (!strcmp(type, "ByteLevel")) {
        tok->byte_level = 1;
        if ((r = trn__hf_bool(v, "add_prefix_space", 1, &flag)) != TRN_OK) return r;
        if (flag) tok->stage[tok->n_stages++] = TRN__PT_PREFIX;
        if ((r = trn__hf_bool(v, "use_regex", 1, &flag)) != TRN_OK) return r;
        if (flag) tok->stage[tok->n_stages++] = TRN__PT_GPT2;
        return TRN_OK;
    }
    if (!strcmp(type, "Split")) {
        trn_json_value p = trn_json_key(v, "pattern");
        if ((r = trn__hf_bool(v, "invert", 0, &flag)) != TRN_OK) return r;
        if (flag) return trn_fail(TRN_ERR_FORMAT, "%s: pre_tokenizer Split with invert: true is not implemented", path);
        if (!trn__hf_str_is(v, "behavior", "Isolated"))
            return trn_fail(TRN_ERR_FORMAT, "%s: pre_tokenizer Split: only behavior \"Isolated\" is implemented", path);
        if (trn_json_typeof(p) != TRN_JSON_OBJECT || !trn_json_has(p, "Regex"))
            return trn_fail(TRN_ERR_FORMAT, "%s: pre_tokenizer Split: only a \"Regex\" pattern is implemented", path);
        if ((r = trn_json_string(trn_json_key(p, "Regex"), pat, sizeof pat)) != TRN_OK) return r;
        if (!strcmp(pat, trn__re_gpt2)) tok->stage[tok->n_stages++] = TRN__PT_GPT2;
        else if (!strcmp(pat, trn__re_llama3)) tok->stage[tok->n_stages++] = TRN__PT_LLAMA3;
        else if (!strcmp(pat, trn__re_qwen2)) tok->stage[tok->n_stages++] = TRN__PT_QWEN2;
        else return trn_fail(TRN_ERR_FORMAT, "%s: split pattern \"%s\" is not one of the known ones (GPT-2's, "
                             "Llama 3's, Qwen2's)", path, pat);
        return TRN_OK;
    }
    if (!strcmp(type, "Digits")) {
        if ((r = trn__hf_bool(v, "individual_digits", 0, &flag)) != TRN_OK) return r;
        tok->stage[tok->n_stages++] = flag ? TRN__PT_DIGIT1 : TRN__PT_DIGITS;
        return TRN_OK;
    }
    if (!strcmp(type, "Metaspace")) {
        char scheme[32];
        if (!trn__hf_str_is(v, "replacement", "\xE2\x96\x81"))
            return trn_fail(TRN_ERR_FORMAT, "%s: Metaspace: only the replacement \"\xE2\x96\x81\" is implemented", path);
        if (trn_json_has(v, "prepend_scheme")) {
            if ((r = trn_json_string(trn_json_key(v, "prepend_scheme"), scheme, sizeof scheme)) != TRN_OK) return r;
            if (!strcmp(scheme, "always")) tok->meta_prepend = 1;
            else if (!strcmp(scheme, "first")) tok->meta_prepend = 2;
            else if (!strcmp(scheme, "never")) tok->meta_prepend = 0;
            else return trn__hf_unsupported(path, "Metaspace prepend_scheme", scheme, "");
        } else {
            if ((r = trn__hf_bool(v, "add_prefix_space", 1, &flag)) != TRN_OK) return r;
            tok->meta_prepend = flag;
        }
        if ((r = trn__hf_bool(v, "split", 1, &flag)) != TRN_OK) return r;
        tok->stage[tok->n_stages++] = flag ? TRN__PT_META_SPLIT : TRN__PT_META;
        return TRN_OK;
    }
    return trn__hf_unsupported(path, "pre_tokenizer", type,
                               "(implemented: ByteLevel, Split, Digits, Metaspace, Sequence)");
}

static trn_result trn__hf_decoder(trn_tokenizer *tok, trn_json_value v, int depth, const char *path) {
    char type[64];
    trn_result r;
    int i, n, flag;
    int64_t start = 0, stop = 0;
    if (trn__hf_absent(v)) return TRN_OK;
    if ((r = trn__hf_type(v, "decoder", type, sizeof type)) != TRN_OK) return r;
    if (!strcmp(type, "Sequence") && depth < 4) {
        trn_json_value list = trn_json_key(v, "decoders");
        for (i = 0, n = trn_json_count(list); i < n; i++)
            if ((r = trn__hf_decoder(tok, trn_json_at(list, i), depth + 1, path)) != TRN_OK) return r;
        return TRN_OK;
    }
    if (!strcmp(type, "ByteLevel") || !strcmp(type, "ByteFallback") || !strcmp(type, "Fuse")) return TRN_OK;
    if (!strcmp(type, "Replace")) {
        trn_json_value p = trn_json_key(v, "pattern");
        if (trn__hf_str_is(p, "String", "\xE2\x96\x81") && trn__hf_str_is(v, "content", " ")) return TRN_OK;
        return trn_fail(TRN_ERR_FORMAT, "%s: decoder Replace: only \"\xE2\x96\x81\" -> \" \" is implemented", path);
    }
    if (!strcmp(type, "Strip")) {
        if ((r = trn_json_int(trn_json_key(v, "start"), 0, 1, &start)) != TRN_OK ||
            (r = trn_json_int(trn_json_key(v, "stop"), 0, 0, &stop)) != TRN_OK || !trn__hf_str_is(v, "content", " "))
            return trn_fail(TRN_ERR_FORMAT, "%s: decoder Strip: only content \" \", start 0 or 1, stop 0 is "
                            "implemented", path);
        if (start) tok->strip_space = 1;
        return TRN_OK;
    }
    if (!strcmp(type, "Metaspace")) {
        char scheme[32] = "always";
        if (trn_json_has(v, "prepend_scheme") &&
            (r = trn_json_string(trn_json_key(v, "prepend_scheme"), scheme, sizeof scheme)) != TRN_OK) return r;
        if ((r = trn__hf_bool(v, "add_prefix_space", 1, &flag)) != TRN_OK) return r;
        if (strcmp(scheme, "never") != 0 && flag) tok->strip_space = 2;
        return TRN_OK;
    }
    return trn__hf_unsupported(path, "decoder", type, "(implemented: ByteLevel, Metaspace, Replace, ByteFallback, "
                               "Fuse, Strip, Sequence)");
}

/* the BOS/EOS of a TemplateProcessing's "single" template */
static trn_result trn__hf_post(trn_tokenizer *tok, trn_json_value v, int depth, const char *path) {
    char type[64], name[256];
    trn_result r;
    int i, n, seen_seq = 0;
    if (trn__hf_absent(v)) return TRN_OK;
    if ((r = trn__hf_type(v, "post_processor", type, sizeof type)) != TRN_OK) return r;
    if (!strcmp(type, "ByteLevel")) return TRN_OK; /* offsets only */
    if (!strcmp(type, "Sequence") && depth < 4) {
        trn_json_value list = trn_json_key(v, "processors");
        for (i = 0, n = trn_json_count(list); i < n; i++)
            if ((r = trn__hf_post(tok, trn_json_at(list, i), depth + 1, path)) != TRN_OK) return r;
        return TRN_OK;
    }
    if (strcmp(type, "TemplateProcessing") != 0)
        return trn__hf_unsupported(path, "post_processor", type, "(implemented: TemplateProcessing, ByteLevel, Sequence)");
    {
        trn_json_value single = trn_json_key(v, "single"), specials = trn_json_key(v, "special_tokens");
        for (i = 0, n = trn_json_count(single); i < n; i++) {
            trn_json_value item = trn_json_at(single, i), sp = trn_json_key(item, "SpecialToken");
            int64_t id;
            if (trn_json_has(item, "Sequence")) { seen_seq = 1; continue; }
            if (trn_json_typeof(sp) != TRN_JSON_OBJECT)
                return trn_fail(TRN_ERR_FORMAT, "%s: post_processor: a template item that is neither Sequence nor "
                                "SpecialToken", path);
            if ((r = trn_json_string(trn_json_key(sp, "id"), name, sizeof name)) != TRN_OK) return r;
            if ((r = trn_json_int(trn_json_at(trn_json_key(trn_json_key(specials, name), "ids"), 0), 0,
                                  TRN__MAX_VOCAB - 1, &id)) != TRN_OK) return r;
            if (seen_seq ? tok->eos_id >= 0 : tok->bos_id >= 0)
                return trn_fail(TRN_ERR_FORMAT, "%s: post_processor: more than one special token %s the text "
                                "is not implemented", path, seen_seq ? "after" : "before");
            if (seen_seq) tok->eos_id = (int)id; else tok->bos_id = (int)id;
        }
    }
    return TRN_OK;
}

/* what the decoder makes of token string t[0..n) (metaspace files):
   "<0xNN>" -> that byte (ByteFallback), "▁" -> " " (Replace) */
static trn_result trn__hf_dec_meta(trn__dbuf *d, const char *t, size_t n) {
    trn_result r = TRN_OK;
    size_t i;
    if (n == 6 && t[0] == '<' && t[1] == '0' && t[2] == 'x' && t[5] == '>' && isxdigit((unsigned char)t[3]) &&
        isxdigit((unsigned char)t[4])) {
        char hex[3] = {t[3], t[4], 0}, b = (char)strtol(hex, NULL, 16);
        return trn__dbuf_put(d, &b, 1);
    }
    for (i = 0; i < n && r == TRN_OK; i++) {
        if (i + 3 <= n && memcmp(t + i, "\xE2\x96\x81", 3) == 0) { r = trn__dbuf_put(d, " ", 1); i += 2; }
        else r = trn__dbuf_put(d, t + i, 1);
    }
    return r;
}

TRNDEF trn_result trn_tokenizer_load_hf(trn_tokenizer *tok, const char *path) {
    trn_json doc;
    trn_json_value root, model, v, added, merges;
    trn__dbuf atext = {NULL, 0, 0, TRN_KIND_RUNTIME}, a = {NULL, 0, 0, TRN_KIND_TEMP};
    trn__dbuf nb = {NULL, 0, 0, TRN_KIND_TEMP}, ncp = {NULL, 0, 0, TRN_KIND_TEMP}; /* NFC of added tokens */
    trn__dbuf both = {NULL, 0, 0, TRN_KIND_TEMP}, l = {NULL, 0, 0, TRN_KIND_TEMP}, rr = {NULL, 0, 0, TRN_KIND_TEMP};
    trn__dbuf dec = {NULL, 0, 0, TRN_KIND_RUNTIME};
    int byte_of[256 + 68];
    char type[64], unk[256];
    trn__jp j;
    trn_result r;
    int i, n_added, max_added = -1, b, flag;
    uint32_t c;
    if (!tok || !path) return trn_fail(TRN_ERR_INVALID, "trn_tokenizer_load_hf: NULL argument");
    trn_tokenizer_init_bytes(tok);
    tok->kind = TRN_TOKENIZER_HF;
    tok->vocab_size = 0;
    if ((r = trn_json_load(&doc, path)) != TRN_OK) return r; /* regular file, strict JSON */
    root = trn_json_root(&doc);
    model = trn_json_key(root, "model");
    if (trn_json_typeof(root) != TRN_JSON_OBJECT || trn_json_typeof(model) != TRN_JSON_OBJECT) {
        r = trn_fail(TRN_ERR_FORMAT, "%s: no \"model\" object: not a tokenizer.json", path);
        goto fail;
    }
    if ((r = trn_json_string(trn_json_key(model, "type"), type, sizeof type)) != TRN_OK) goto fail;
    if (strcmp(type, "BPE") != 0) {
        r = trn__hf_unsupported(path, "model type", type, "(only BPE: Unigram, WordPiece and WordLevel are not)");
        goto fail;
    }
    if (!trn__hf_absent(trn_json_key(model, "dropout")) ||
        !(trn__hf_absent(trn_json_key(model, "continuing_subword_prefix")) || trn__hf_str_is(model, "continuing_subword_prefix", "")) ||
        !(trn__hf_absent(trn_json_key(model, "end_of_word_suffix")) || trn__hf_str_is(model, "end_of_word_suffix", ""))) {
        r = trn_fail(TRN_ERR_FORMAT, "%s: BPE dropout, continuing_subword_prefix and end_of_word_suffix are not "
                     "implemented", path);
        goto fail;
    }
    if ((r = trn__hf_bool(model, "byte_fallback", 0, &tok->byte_fallback)) != TRN_OK ||
        (r = trn__hf_bool(model, "ignore_merges", 0, &tok->ignore_merges)) != TRN_OK ||
        (r = trn__hf_bool(model, "fuse_unk", 0, &tok->fuse_unk)) != TRN_OK)
        goto fail;
    /* normalizer: none, NFC, Llama 2's Prepend("▁") + Replace(" ", "▁"), or
       a Sequence of NFC and that pair (NFC first: NFC never touches a
       space or "▁", so the order makes no difference) */
    v = trn_json_key(root, "normalizer");
    if (!trn__hf_absent(v)) {
        trn_json_value list = trn_json_key(v, "normalizers"), p0, p1;
        int np, ip;
        if ((r = trn__hf_type(v, "normalizer", type, sizeof type)) != TRN_OK) goto fail;
        np = strcmp(type, "Sequence") == 0 ? trn_json_count(list) : 1;
        for (ip = 0; ip < np; ip++) {
            p0 = np == 1 && strcmp(type, "Sequence") != 0 ? v : trn_json_at(list, ip);
            p1 = trn_json_at(list, ip + 1);
            if ((r = trn__hf_type(p0, "normalizer", type, sizeof type)) != TRN_OK) goto fail;
            if (!strcmp(type, "NFC") && !tok->nfc) {
                tok->nfc = 1;
            } else if (!strcmp(type, "Prepend") && trn__hf_str_is(p0, "prepend", "\xE2\x96\x81") && !tok->meta_norm &&
                       trn__hf_str_is(p1, "type", "Replace") && trn__hf_str_is(trn_json_key(p1, "pattern"), "String", " ") &&
                       trn__hf_str_is(p1, "content", "\xE2\x96\x81")) {
                tok->meta_norm = 1;
                ip++;
            } else {
                r = trn__hf_unsupported(path, "normalizer", type,
                                        "(only none, NFC, or a Sequence of NFC and [Prepend \"\xE2\x96\x81\", Replace \" \" -> "
                                        "\"\xE2\x96\x81\"])");
                goto fail;
            }
        }
    }
    if ((r = trn__hf_pre(tok, trn_json_key(root, "pre_tokenizer"), 0, path)) != TRN_OK ||
        (r = trn__hf_decoder(tok, trn_json_key(root, "decoder"), 0, path)) != TRN_OK)
        goto fail;
    if (tok->byte_level && (tok->meta_norm || tok->byte_fallback)) {
        r = trn_fail(TRN_ERR_FORMAT, "%s: ByteLevel with a metaspace normalizer or byte_fallback is not "
                     "implemented", path);
        goto fail;
    }
    /* added tokens: their largest id sizes the tables */
    added = trn_json_key(root, "added_tokens");
    if (!trn__hf_absent(added) && trn_json_typeof(added) != TRN_JSON_ARRAY) {
        r = trn_fail(TRN_ERR_FORMAT, "%s: 'added_tokens' is not a list", path);
        goto fail;
    }
    n_added = trn_json_count(added);
    if (n_added > 0) {
        tok->added = (trn_added_token *)trn_alloc((size_t)n_added * sizeof(trn_added_token), TRN_KIND_RUNTIME);
        if (!tok->added) { r = TRN_ERR_NOMEM; goto fail; }
    }
    j = trn__json_cursor(added);
    if (n_added > 0) trn__jeat(&j, '[');
    for (i = 0; i < n_added; i++) { /* walk the list once (trn_json_at would rescan it) */
        trn_json_value t;
        trn_added_token *at = &tok->added[i];
        int64_t id;
        const char *flags[3] = {"single_word", "lstrip", "rstrip"};
        int f;
        if (i > 0) trn__jeat(&j, ',');
        trn__jws(&j);
        t.doc = &doc; t.at = j.p; t.key = "added_tokens"; t.twice = 0;
        if ((r = trn__jskip(&j, 1)) != TRN_OK) goto fail;
        if (trn_json_typeof(t) != TRN_JSON_OBJECT) { r = trn_fail(TRN_ERR_FORMAT, "%s: added token %d is not an object", path, i); goto fail; }
        if ((r = trn_json_int(trn_json_key(t, "id"), 0, TRN__MAX_VOCAB - 1, &id)) != TRN_OK) goto fail;
        at->id = (int)id;
        if ((int)id > max_added) max_added = (int)id;
        if ((r = trn__hf_bool(t, "special", 0, &at->special)) != TRN_OK ||
            (r = trn__hf_bool(t, "normalized", !at->special, &at->normalized)) != TRN_OK)
            goto fail;
        for (f = 0; f < 3; f++) {
            if ((r = trn__hf_bool(t, flags[f], 0, &flag)) != TRN_OK) goto fail;
            if (flag) { r = trn_fail(TRN_ERR_FORMAT, "%s: added token %d: %s: true is not implemented", path, (int)id, flags[f]); goto fail; }
        }
        { /* content, then the pattern matched */
            trn__jp cj = trn__json_cursor(trn_json_key(t, "content"));
            size_t k;
            if (trn_json_typeof(trn_json_key(t, "content")) != TRN_JSON_STRING) {
                r = trn_fail(TRN_ERR_FORMAT, "%s: added token %d has no string 'content'", path, (int)id);
                goto fail;
            }
            if ((r = trn__hf_jstr(&cj, &a)) != TRN_OK) goto fail;
            if (a.n == 0 || atext.n + 10 * a.n + 3 > 0x7FFFFFFFu) { /* NFC: <= 3x the bytes, metaspace: 3x that */
                r = trn_fail(TRN_ERR_FORMAT, "%s: added token %d: empty or too long", path, (int)id);
                goto fail;
            }
            at->off = (uint32_t)atext.n; at->len = (uint32_t)a.n;
            if ((r = trn__dbuf_put(&atext, a.p, a.n)) != TRN_OK) goto fail;
            at->poff = (uint32_t)atext.n;
            if (at->normalized && tok->nfc) { /* its pattern is NFC(content) */
                if ((r = trn__nfc(&nb, &ncp, (const unsigned char *)a.p, a.n)) != TRN_OK) goto fail;
                a.n = 0;
                if ((r = trn__dbuf_put(&a, nb.p, nb.n)) != TRN_OK) goto fail;
            }
            if (at->normalized && tok->meta_norm) {
                if ((r = trn__dbuf_put(&atext, "\xE2\x96\x81", 3)) != TRN_OK) goto fail;
                for (k = 0; k < a.n; k++)
                    if ((r = trn__dbuf_put(&atext, a.p[k] == ' ' ? "\xE2\x96\x81" : a.p + k, a.p[k] == ' ' ? 3 : 1)) != TRN_OK)
                        goto fail;
            } else if ((r = trn__dbuf_put(&atext, a.p, a.n)) != TRN_OK) goto fail;
            at->plen = (uint32_t)(atext.n - at->poff);
        }
    }
    tok->n_added = n_added;
    /* the model's vocabulary and lookup (added tokens are not looked up by bytes) */
    v = trn_json_key(model, "vocab");
    if (trn_json_typeof(v) != TRN_JSON_OBJECT) { r = trn_fail(TRN_ERR_FORMAT, "%s: model.vocab is not an object", path); goto fail; }
    for (c = 0; c < 256 + 68; c++) byte_of[c] = trn__bpe_byte_of(c);
    j = trn__json_cursor(v);
    if ((r = trn__bpe_parse_vocab(tok, &j, path, tok->byte_level ? byte_of : NULL, max_added + 1)) != TRN_OK ||
        (r = trn__bpe_build_lookup(tok, path)) != TRN_OK)
        goto fail;
    if (tok->byte_level) {
        for (b = 0; b < 256; b++) {
            char ch = (char)b;
            if ((tok->byte_id[b] = trn_tokenizer_find(tok, &ch, 1)) < 0) {
                r = trn_fail(TRN_ERR_FORMAT, "%s: no token for byte 0x%02X (a byte-level vocabulary has all 256)", path, b);
                goto fail;
            }
        }
    } else {
        for (b = 0; b < 256; b++) {
            char name[8];
            snprintf(name, sizeof name, "<0x%02X>", b);
            name[7] = (char)b; /* the single-byte token, an ASCII character (none for 0x80..0xFF) */
            tok->byte_id[b] = b < 0x80 ? trn_tokenizer_find(tok, name + 7, 1) : -1;
            tok->byte_token[b] = tok->byte_fallback ? trn_tokenizer_find(tok, name, 6) : -1;
        }
    }
    v = trn_json_key(model, "unk_token");
    if (!trn__hf_absent(v)) {
        if ((r = trn_json_string(v, unk, sizeof unk)) != TRN_OK) goto fail;
        if ((tok->unk_id = trn_tokenizer_find(tok, unk, strlen(unk))) < 0) {
            r = trn_fail(TRN_ERR_FORMAT, "%s: unk_token \"%s\" is not in the vocabulary", path, unk);
            goto fail;
        }
    }
    /* merges: "a b" strings or ["a", "b"] pairs, best first */
    merges = trn_json_key(model, "merges");
    if (trn_json_typeof(merges) != TRN_JSON_ARRAY) { r = trn_fail(TRN_ERR_FORMAT, "%s: model.merges is not a list", path); goto fail; }
    if ((r = trn__bpe_merges_alloc(tok, (size_t)trn_json_count(merges))) != TRN_OK) goto fail;
    j = trn__json_cursor(merges);
    trn__jeat(&j, '[');
    if (!trn__jeat(&j, ']')) for (i = 0;; i++) {
        char where[600];
        snprintf(where, sizeof where, "%s: merge %d", path, i);
        trn__jws(&j);
        if (j.p < j.end && *j.p == '[') {
            j.p++;
            if ((r = trn__hf_jstr(&j, &l)) != TRN_OK) goto fail;
            if (!trn__jeat(&j, ',')) { r = trn__jerr(&j, "expected a pair of strings"); goto fail; }
            if ((r = trn__hf_jstr(&j, &rr)) != TRN_OK) goto fail;
            if (!trn__jeat(&j, ']')) { r = trn__jerr(&j, "expected a pair of strings"); goto fail; }
            r = trn__bpe_add_merge(tok, tok->byte_level ? byte_of : NULL, l.p, l.n, rr.p, rr.n, &a, &both, where);
        } else {
            const char *sp;
            if ((r = trn__hf_jstr(&j, &l)) != TRN_OK) goto fail;
            sp = (const char *)memchr(l.p, ' ', l.n);
            if (!sp || sp == l.p || sp == l.p + l.n - 1 || memchr(sp + 1, ' ', (size_t)(l.p + l.n - sp - 1))) {
                r = trn_fail(TRN_ERR_FORMAT, "%s: expected two tokens separated by one space", where);
                goto fail;
            }
            r = trn__bpe_add_merge(tok, tok->byte_level ? byte_of : NULL, l.p, (size_t)(sp - l.p), sp + 1,
                                   (size_t)(l.p + l.n - sp - 1), &a, &both, where);
        }
        if (r != TRN_OK) goto fail;
        if (trn__jeat(&j, ']')) break;
        if (!trn__jeat(&j, ',')) { r = trn__jerr(&j, "expected ',' or ']'"); goto fail; }
    }
    if ((r = trn__hf_post(tok, trn_json_key(root, "post_processor"), 0, path)) != TRN_OK) goto fail;
    if ((tok->bos_id >= tok->vocab_size) || (tok->eos_id >= tok->vocab_size)) {
        r = trn_fail(TRN_ERR_FORMAT, "%s: post_processor: a special token id is outside the vocabulary", path);
        goto fail;
    }
    /* added tokens bucketed by the first byte of their pattern */
    tok->added_text = atext.p; atext.p = NULL;
    if (n_added > 0) {
        int cnt[257] = {0};
        tok->added_by_byte = (int *)trn_alloc((size_t)n_added * sizeof(int), TRN_KIND_RUNTIME);
        if (!tok->added_by_byte) { r = TRN_ERR_NOMEM; goto fail; }
        for (i = 0; i < n_added; i++) cnt[(unsigned char)tok->added_text[tok->added[i].poff] + 1]++;
        for (b = 0; b < 256; b++) cnt[b + 1] += cnt[b];
        memcpy(tok->added_first, cnt, sizeof cnt);
        for (i = 0; i < n_added; i++) tok->added_by_byte[cnt[(unsigned char)tok->added_text[tok->added[i].poff]]++] = i;
    }
    /* what each id decodes to */
    tok->dec_off = (uint32_t *)trn_alloc((size_t)tok->vocab_size * sizeof(uint32_t), TRN_KIND_RUNTIME);
    tok->dec_len = (uint32_t *)trn_alloc((size_t)tok->vocab_size * sizeof(uint32_t), TRN_KIND_RUNTIME);
    if (!tok->dec_off || !tok->dec_len || (r = trn__dbuf_reserve(&dec, 0)) != TRN_OK) { r = TRN_ERR_NOMEM; goto fail; }
    for (i = 0; i < tok->vocab_size; i++) { tok->dec_off[i] = 0; tok->dec_len[i] = UINT32_MAX; }
    for (i = 0; i < tok->vocab_size; i++) {
        size_t start = dec.n;
        if (tok->len[i] == UINT32_MAX) continue;
        r = tok->byte_level ? trn__dbuf_put(&dec, tok->bytes + tok->off[i], tok->len[i])
                            : trn__hf_dec_meta(&dec, tok->bytes + tok->off[i], tok->len[i]);
        if (r != TRN_OK || dec.n > 0xFFFFFFFFu / 2) { r = TRN_ERR_NOMEM; goto fail; }
        tok->dec_off[i] = (uint32_t)start; tok->dec_len[i] = (uint32_t)(dec.n - start);
    }
    for (i = 0; i < n_added; i++) { /* added tokens decode from their content (normalized: its pattern,
                                          as the package stores it: "TODO" becomes "▁TODO" for Llama 2) */
        const trn_added_token *at = &tok->added[i];
        const char *t = tok->added_text + at->poff;
        size_t start = dec.n, k, w;
        int all = 1;
        if (tok->byte_level) { /* ByteLevel maps the content back if every character is of its alphabet */
            for (k = 0; k < at->plen && all; k += w) {
                uint32_t cp;
                w = trn__utf8_decode((const unsigned char *)t + k, at->plen - k, &cp);
                all = cp < 256 + 68 && byte_of[cp] >= 0;
            }
            r = TRN_OK;
            for (k = 0; k < at->plen && r == TRN_OK; k += w) {
                uint32_t cp;
                w = trn__utf8_decode((const unsigned char *)t + k, at->plen - k, &cp);
                r = all ? trn__bpe_put_char(&dec, byte_of, cp) : trn__dbuf_put(&dec, t + k, w);
            }
        } else r = trn__hf_dec_meta(&dec, t, at->plen);
        if (r != TRN_OK || dec.n > 0xFFFFFFFFu / 2) { r = TRN_ERR_NOMEM; goto fail; }
        tok->dec_off[at->id] = (uint32_t)start; tok->dec_len[at->id] = (uint32_t)(dec.n - start);
        if (at->len == 13 && memcmp(tok->added_text + at->off, "<|endoftext|>", 13) == 0) tok->eot_id = at->id;
    }
    if (tok->eot_id < 0) tok->eot_id = trn_tokenizer_find(tok, "<|endoftext|>", 13);
    tok->dec = dec.p; dec.p = NULL;
    trn_free(a.p); trn_free(both.p); trn_free(l.p); trn_free(rr.p); trn_free(nb.p); trn_free(ncp.p);
    trn_json_free(&doc);
    return TRN_OK;
fail:
    trn_free(nb.p); trn_free(ncp.p);
    trn_free(atext.p); trn_free(a.p); trn_free(both.p); trn_free(l.p); trn_free(rr.p); trn_free(dec.p);
    trn_json_free(&doc);
    trn_tokenizer_free(tok);
    return r;
}

TRNDEF trn_result trn_tokenizer_load(trn_tokenizer *tok, const char *path) {
    struct stat st;
    char file[4096];
    if (!tok || !path) return trn_fail(TRN_ERR_INVALID, "trn_tokenizer_load: NULL argument");
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        if ((size_t)snprintf(file, sizeof file, "%s/tokenizer.json", path) >= sizeof file)
            return trn_fail(TRN_ERR_INVALID, "tokenizer directory name too long");
        if (stat(file, &st) == 0) return trn_tokenizer_load_hf(tok, file);
        return trn_tokenizer_load_bpe_dir(tok, path);
    }
    return trn_tokenizer_load_hf(tok, path);
}

/* ---- llm.c token shards ------------------------------------------------ */
static uint32_t trn__le32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void trn__put_le32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)v; p[1] = (unsigned char)(v >> 8);
    p[2] = (unsigned char)(v >> 16); p[3] = (unsigned char)(v >> 24);
}

TRNDEF trn_result trn_token_shard_read_bits(trn_tokens *out, const char *path, int *bits) {
    unsigned char hdr[1024], buf[65536];
    FILE *f;
    trn_result r = TRN_OK;
    size_t got, i, left, w, n0;
    long size;
    int32_t magic, version, ntok;
    if (!out || !path) return trn_fail(TRN_ERR_INVALID, "trn_token_shard_read: NULL argument");
    if (trn_check_regular(path) != TRN_OK) return trn_fail(TRN_ERR_IO, "open %s", trn_error_reason());
    if (!(f = fopen(path, "rb"))) return trn_fail(TRN_ERR_IO, "open %s: %s", path, strerror(errno));
    if (fseek(f, 0, SEEK_END) != 0 || (size = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
        r = trn_fail(TRN_ERR_IO, "seek %s: %s", path, strerror(errno));
        goto done;
    }
    got = fread(hdr, 1, sizeof hdr, f);
    if (got < sizeof hdr) {
        r = ferror(f) ? trn_fail(TRN_ERR_IO, "read %s: %s", path, strerror(errno))
                      : trn_fail(TRN_ERR_FORMAT, "%s: %zu bytes, shorter than a token shard's 1024-byte "
                                 "header", path, got);
        goto done;
    }
    magic = (int32_t)trn__le32(hdr);
    version = (int32_t)trn__le32(hdr + 4);
    ntok = (int32_t)trn__le32(hdr + 8);
    if (magic != TRN_TOKEN_SHARD_MAGIC && magic != TRN_TOKEN_SHARD_MAGIC32) {
        r = trn_fail(TRN_ERR_FORMAT, "%s: bad magic %d, a token shard starts with %d (uint16 ids) or %d (uint32)",
                     path, (int)magic, TRN_TOKEN_SHARD_MAGIC, TRN_TOKEN_SHARD_MAGIC32);
        goto done;
    }
    /* the (magic, version) pair says the width; llm.c never mixes them */
    w = magic == TRN_TOKEN_SHARD_MAGIC ? 2 : 4;
    if (version != (w == 2 ? TRN_TOKEN_SHARD_VERSION : TRN_TOKEN_SHARD_VERSION32)) {
        r = trn_fail(TRN_ERR_FORMAT, "%s: shard magic %d with version %d; known: magic %d version %d (uint16 ids), "
                     "magic %d version %d (uint32)", path, (int)magic, (int)version, TRN_TOKEN_SHARD_MAGIC,
                     TRN_TOKEN_SHARD_VERSION, TRN_TOKEN_SHARD_MAGIC32, TRN_TOKEN_SHARD_VERSION32);
        goto done;
    }
    if (ntok < 0 || (long long)size != 1024 + (long long)w * ntok) {
        r = trn_fail(TRN_ERR_FORMAT, "%s: the header says %d uint%d tokens (%lld bytes) but the file has %ld "
                     "bytes%s", path, (int)ntok, (int)w * 8, 1024 + (long long)w * ntok, size,
                     (long long)size < 1024 + (long long)w * ntok ? " (truncated?)" : "");
        goto done;
    }
    if ((r = trn__tokens_reserve(out, (size_t)ntok)) != TRN_OK) goto done;
    n0 = out->n;
    for (left = (size_t)ntok; left > 0 && r == TRN_OK; left -= got / w) {
        size_t want = TRN__MIN(left * w, sizeof buf);
        got = fread(buf, 1, want, f);
        if (got != want) {
            r = trn_fail(TRN_ERR_IO, "read %s: %s", path, ferror(f) ? strerror(errno) : "file shrank");
            break;
        }
        if (w == 2)
            for (i = 0; i < got; i += 2) out->ids[out->n++] = buf[i] | buf[i + 1] << 8;
        else
            for (i = 0; i < got && r == TRN_OK; i += 4) {
                uint32_t id = trn__le32(buf + i);
                if (id > (uint32_t)INT32_MAX) /* ids are int here; no vocabulary comes near 2^31 */
                    r = trn_fail(TRN_ERR_FORMAT, "%s: token %u at position %zu is >= 2^31", path, (unsigned)id,
                                 out->n - n0);
                else
                    out->ids[out->n++] = (int)id;
            }
    }
    if (r != TRN_OK) out->n = n0; /* nothing of a bad file is kept */
    else if (bits) *bits = (int)w * 8;
done:
    fclose(f);
    return r;
}

TRNDEF trn_result trn_token_shard_read(trn_tokens *out, const char *path) {
    return trn_token_shard_read_bits(out, path, NULL);
}

TRNDEF trn_result trn_token_shard_write_bits(const char *path, const int *ids, size_t n, int bits) {
    unsigned char hdr[1024], buf[65536];
    char *tmp;
    FILE *f;
    size_t i, k, w;
    int ok, big = 0;
    if (!path || (!ids && n)) return trn_fail(TRN_ERR_INVALID, "trn_token_shard_write: NULL argument");
    if (bits != 0 && bits != 16 && bits != 32)
        return trn_fail(TRN_ERR_INVALID, "%s: a token shard holds 16- or 32-bit ids, not %d", path, bits);
    if (n > INT32_MAX)
        return trn_fail(TRN_ERR_INVALID, "%s: %zu tokens do not fit one shard (at most 2^31-1)", path, n);
    for (i = 0; i < n; i++) {
        if (ids[i] < 0)
            return trn_fail(TRN_ERR_INVALID, "%s: token %d at position %zu is negative", path, ids[i], i);
        if (ids[i] > 65535 && bits == 16)
            return trn_fail(TRN_ERR_INVALID, "%s: token %d at position %zu does not fit a uint16 shard", path,
                            ids[i], i);
        big |= ids[i] > 65535;
    }
    w = bits == 32 || (bits == 0 && big) ? 4 : 2; /* bytes per id */
    if (!(tmp = (char *)trn_alloc(strlen(path) + 5, TRN_KIND_TEMP))) return TRN_ERR_NOMEM;
    sprintf(tmp, "%s.tmp", path);
    if (!(f = fopen(tmp, "wb"))) {
        trn_result r = trn_fail(TRN_ERR_IO, "open %s: %s", tmp, strerror(errno));
        trn_free(tmp);
        return r;
    }
    memset(hdr, 0, sizeof hdr);
    trn__put_le32(hdr, w == 2 ? TRN_TOKEN_SHARD_MAGIC : TRN_TOKEN_SHARD_MAGIC32);
    trn__put_le32(hdr + 4, w == 2 ? TRN_TOKEN_SHARD_VERSION : TRN_TOKEN_SHARD_VERSION32);
    trn__put_le32(hdr + 8, (uint32_t)n);
    ok = fwrite(hdr, 1, sizeof hdr, f) == sizeof hdr;
    for (i = 0; i < n && ok; i += k) {
        for (k = 0; k < sizeof buf / w && i + k < n; k++) {
            if (w == 4) { trn__put_le32(buf + 4 * k, (uint32_t)ids[i + k]); continue; }
            buf[2 * k] = (unsigned char)ids[i + k];
            buf[2 * k + 1] = (unsigned char)(ids[i + k] >> 8);
        }
        ok = fwrite(buf, 1, w * k, f) == w * k;
    }
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp, path) != 0) {
        trn_result r = trn_fail(TRN_ERR_IO, "write %s: %s", ok ? path : tmp, strerror(errno));
        remove(tmp);
        trn_free(tmp);
        return r;
    }
    trn_free(tmp);
    return TRN_OK;
}

TRNDEF trn_result trn_token_shard_write(const char *path, const int *ids, size_t n) {
    return trn_token_shard_write_bits(path, ids, n, 0);
}

TRNDEF int trn_token_shard_sniff(const char *path) {
    unsigned char head[4];
    uint32_t magic = 0;
    FILE *f;
    if (!path || trn_check_regular(path) != TRN_OK || !(f = fopen(path, "rb"))) return 0;
    if (fread(head, 1, 4, f) == 4) magic = trn__le32(head);
    fclose(f);
    return magic == TRN_TOKEN_SHARD_MAGIC || magic == TRN_TOKEN_SHARD_MAGIC32;
}

TRNDEF trn_result trn_tokens_load(trn_tokens *out, const char *path, const trn_tokenizer *tok) {
    size_t plen, n0, len;
    unsigned char head[4] = {0, 0, 0, 0};
    int shard;
    char *text;
    const char *one[1];
    trn_result r;
    FILE *f;
    if (!out || !path) return trn_fail(TRN_ERR_INVALID, "trn_tokens_load: NULL argument");
    plen = strlen(path);
    shard = plen >= 4 && strcmp(path + plen - 4, ".bin") == 0;
    if (!shard) { /* a text file that is secretly a shard? look at its magic */
        if (trn_check_regular(path) != TRN_OK) return trn_fail(TRN_ERR_IO, "open %s", trn_error_reason());
        if (!(f = fopen(path, "rb"))) return trn_fail(TRN_ERR_IO, "open %s: %s", path, strerror(errno));
        shard = fread(head, 1, 4, f) == 4 &&
                (trn__le32(head) == TRN_TOKEN_SHARD_MAGIC || trn__le32(head) == TRN_TOKEN_SHARD_MAGIC32);
        fclose(f);
    }
    n0 = out->n;
    if (shard) {
        if ((r = trn_token_shard_read(out, path)) != TRN_OK) return r;
        if (out->n == n0) return trn_fail(TRN_ERR_INVALID, "%s: the shard holds no tokens", path);
        return TRN_OK;
    }
    if (!tok) return trn_fail(TRN_ERR_INVALID, "trn_tokens_load: %s is text but no tokenizer was given", path);
    one[0] = path;
    if ((r = trn_text_read_files(&text, &len, one, 1, 0)) != TRN_OK) return r;
    if (len == 0) r = trn_fail(TRN_ERR_INVALID, "%s: the file is empty", path);
    else r = trn_tokenizer_encode(tok, text, len, out);
    trn_free(text);
    return r;
}

/* ---- the loader -------------------------------------------------------- */
static uint64_t trn__loader_fingerprint(const trn_loader *L) {
    uint64_t h = trn__mix64(0x7472616E2E68ull ^ (uint64_t)L->n_train);
    h = trn__mix64(h ^ (uint64_t)L->n_val);
    h = trn__mix64(h ^ ((uint64_t)(uint32_t)L->desc.B << 32 | (uint32_t)L->desc.T));
    return trn__mix64(h ^ (uint64_t)L->desc.sequential);
}

/* the visiting order of pos.epoch: identity (sequential) or a permutation
   that depends only on (seed, epoch) */
static void trn__loader_order(trn_loader *L) {
    trn_rng rng;
    size_t i;
    for (i = 0; i < L->train_windows; i++) L->order[i] = (int)i;
    if (L->desc.sequential) return;
    trn_rng_seed(&rng, L->pos.seed ^ trn__mix64((uint64_t)L->pos.epoch + 0x9E3779B97F4A7C15ull));
    trn_rng_shuffle(&rng, L->order, (int)L->train_windows);
}

TRNDEF trn_result trn_loader_init(trn_loader *L, const int *tokens, size_t n, const trn_loader_desc *desc) {
    size_t need;
    if (!L || !desc || (!tokens && n)) return trn_fail(TRN_ERR_INVALID, "trn_loader_init: NULL argument");
    memset(L, 0, sizeof *L);
    L->desc = *desc;
    if (desc->B < 1 || desc->T < 1)
        return trn_fail(TRN_ERR_INVALID, "loader: batch %d x sequence %d, both must be >= 1", desc->B, desc->T);
    if (!(desc->val_fraction >= 0.0f && desc->val_fraction < 1.0f))
        return trn_fail(TRN_ERR_INVALID, "loader: validation fraction %g is outside [0, 1)",
                        (double)desc->val_fraction);
    if (L->desc.val_fraction == 0.0f) L->desc.val_fraction = 0.1f;
    if (L->desc.no_val) L->desc.val_fraction = 0.0f;
    L->tokens = tokens;
    L->n_val = (size_t)((double)n * (double)L->desc.val_fraction);
    L->n_train = n - L->n_val;
    need = (size_t)desc->B * (size_t)desc->T + 1;
    if (L->n_train < need)
        return trn_fail(TRN_ERR_INVALID, "loader: the training split has %zu tokens, one batch needs B*T+1 = "
                        "%zu (B=%d, T=%d): use more data or a smaller batch/sequence", L->n_train, need,
                        desc->B, desc->T);
    if (!L->desc.no_val && L->n_val < need)
        return trn_fail(TRN_ERR_INVALID, "loader: the validation split (last %g of %zu tokens) has %zu "
                        "tokens, one batch needs B*T+1 = %zu (B=%d, T=%d): use more data, a smaller "
                        "batch/sequence, or no validation", (double)L->desc.val_fraction, n, L->n_val, need,
                        desc->B, desc->T);
    L->train_windows = (L->n_train - 1) / (size_t)desc->T;
    L->val_windows = L->n_val ? (L->n_val - 1) / (size_t)desc->T : 0;
    if (L->train_windows > (size_t)INT_MAX)
        return trn_fail(TRN_ERR_INVALID, "loader: %zu windows of %d tokens are too many; raise T",
                        L->train_windows, desc->T);
    L->batches_per_epoch = (int64_t)(L->train_windows / (size_t)desc->B);
    L->val_batches = (int64_t)(L->val_windows / (size_t)desc->B);
    L->order = (int *)trn_alloc(L->train_windows * sizeof(int), TRN_KIND_RUNTIME);
    if (!L->order) return TRN_ERR_NOMEM;
    L->pos.seed = desc->seed;
    L->pos.check = trn__loader_fingerprint(L);
    trn__loader_order(L);
    return TRN_OK;
}

TRNDEF void trn_loader_free(trn_loader *L) {
    if (!L) return;
    trn_free(L->order);
    memset(L, 0, sizeof *L);
}

/* row r of (x, y) from the window that starts at token `start` */
static void trn__loader_row(const int *tokens, size_t start, int T, int *x, int *y) {
    memcpy(x, tokens + start, (size_t)T * sizeof(int));
    memcpy(y, tokens + start + 1, (size_t)T * sizeof(int));
}

TRNDEF void trn_loader_next(trn_loader *L, int *x, int *y) {
    int b, B, T;
    if (!L || !L->order || !x || !y) trn_fatal("trn_loader_next: loader not initialized or NULL x/y");
    B = L->desc.B; T = L->desc.T;
    if (L->pos.batch >= L->batches_per_epoch) { /* epoch done: the next one has its own order */
        L->pos.epoch++;
        L->pos.batch = 0;
        trn__loader_order(L);
    }
    for (b = 0; b < B; b++) {
        size_t w = (size_t)L->order[(size_t)L->pos.batch * (size_t)B + (size_t)b];
        trn__loader_row(L->tokens, w * (size_t)T, T, x + (size_t)b * T, y + (size_t)b * T);
    }
    L->pos.batch++;
}

TRNDEF void trn_loader_val_batch(const trn_loader *L, int64_t i, int *x, int *y) {
    int b, B, T;
    if (!L || !x || !y) trn_fatal("trn_loader_val_batch: NULL argument");
    if (L->val_batches <= 0) trn_fatal("trn_loader_val_batch: this loader has no validation split");
    B = L->desc.B; T = L->desc.T;
    i %= L->val_batches;
    if (i < 0) i += L->val_batches;
    for (b = 0; b < B; b++) {
        size_t w = (size_t)i * (size_t)B + (size_t)b;
        trn__loader_row(L->tokens, L->n_train + w * (size_t)T, T, x + (size_t)b * T, y + (size_t)b * T);
    }
}

TRNDEF trn_loader_pos trn_loader_tell(const trn_loader *L) {
    if (!L) trn_fatal("trn_loader_tell: NULL loader");
    return L->pos;
}

TRNDEF trn_result trn_loader_seek(trn_loader *L, const trn_loader_pos *pos) {
    if (!L || !pos || !L->order)
        return trn_fail(TRN_ERR_INVALID, "trn_loader_seek: NULL or uninitialized loader");
    if (pos->check != L->pos.check)
        return trn_fail(TRN_ERR_MISMATCH, "loader: the saved position belongs to other data or another "
                        "batch "
                        "shape (fingerprint %016llx, this loader %016llx)",
                        (unsigned long long)pos->check, (unsigned long long)L->pos.check);
    if (pos->epoch < 0 || pos->batch < 0 || pos->batch > L->batches_per_epoch)
        return trn_fail(TRN_ERR_INVALID, "loader: position epoch %lld batch %lld is out of range (%lld "
                        "batches per epoch)",
                        (long long)pos->epoch, (long long)pos->batch, (long long)L->batches_per_epoch);
    L->pos = *pos;
    trn__loader_order(L);
    return TRN_OK;
}
/* <<data implementation end */

#endif /* TRAIN_DATA_IMPLEMENTATION_DONE */
#endif /* TRAIN_IMPLEMENTATION */
