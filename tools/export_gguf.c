/* tools/export_gguf.c - a Llama trained here, out to llama.cpp (and Ollama):
   one GGUF file (version 3) with the llama architecture's metadata keys and
   tensor names.

     tools/export_gguf [--type f32|f16|bf16] [--tokenizer FILE] CKPT FILE

   CKPT: a model.safetensors or ckpt_*.safetensors of examples/llama. The
   file (the GGUF format as llama.cpp's docs/gguf.md describe it):
     "GGUF", version 3, tensor count, key/value count (little endian)
     key/values: a string key, a value type, the value
     tensor infos: name, dims (fastest first: a (rows, cols) matrix is
       ne = {cols, rows}), ggml type (F32 0, F16 1, BF16 30), data offset
     padding to 32 bytes, then each tensor's data, each 32-byte aligned
   What changes on the way out:
     names     token_embd, blk.N.attn_norm / attn_q / attn_k / attn_v /
               attn_output / ffn_norm / ffn_gate / ffn_up / ffn_down,
               output_norm, output (absent when tied: llama.cpp then uses
               token_embd); the vocabulary unpadded; q/k/v split
     q and k   rows permuted within each head: llama.cpp's llama RoPE turns
               neighbour pairs (2i, 2i+1), Hugging Face's and the kit's turn
               (i, i + hs/2): row hs/2*j + i moves to 2i + j (the inverse of
               the permutation HF's conversion script applies to Meta's)
     RoPE      plain: llama.rope.freq_base; linear: rope.scaling.type
               "linear" + factor; llama3: a rope_freqs tensor of hs/2
               divisors (llama.cpp divides each frequency by its entry);
               dynamic has no GGUF form: refused
     types     --type f16/bf16 store matrices in that type (round to nearest
               even); vectors (norms, rope_freqs) stay F32, as llama.cpp's
               converter keeps them
     tokenizer the run's tokenizer.json (--tokenizer FILE, else the
               checkpoint's run.tokenizer when that file exists), in the
               keys llama.cpp reads (tokenizer.ggml.*); its vocabulary must
               be the model's, id for id (a mismatch is refused):
               byte-level BPE (GPT-2, Llama 3, Qwen2, SmolLM style): model
                 "gpt2", pre the name llama.cpp knows the split by ("gpt-2",
                 "llama-bpe", "qwen2", "smollm"), tokens as the file stores
                 them ("Ġthe"), merges "left right" in rank order;
               byte fallback + "▁" (Llama 2, TinyLlama, Mistral): model
                 "llama" (llama.cpp's SentencePiece-style tokenizer), tokens
                 as stored ("▁the", "<0x0A>"), scores minus the merge rank
                 as llama.cpp's converter writes for a tokenizer.json (it
                 has no scores; llama.cpp then merges by position, not by
                 the file's merge ranks), no merges, add_space_prefix;
               token types: control (special added tokens), user-defined
                 (other added tokens), byte ("<0xNN>" of a byte-fallback
                 file), unknown (the unk_token), unused (an id no token
                 has, "[PADn]"), normal; bos_token_id / add_bos_token from
                 the post-processor's template, eos_token_id from it or the
                 conventional name (tools/export_common.h, eos_of),
                 unknown_token_id.
               Without a tokenizer.json, a model of the kit's bytes gets its
               byte vocabulary (a "gpt2" BPE with no merges: token b is byte
               b in GPT-2's byte-to-character map, so llama.cpp encodes text
               byte by byte as the kit does); another vocabulary is written
               without a tokenizer (a note says so)
   Exit status: 0 written, 2 bad input (one line on stderr). */
#define TRAIN_IMPLEMENTATION
#include "train.h"
#include "extras/train_data.h" // the tokenizer.json reader

#define EXPORT_PROG "export_gguf"
#include "export_common.h" // die, meta_long, meta_double, run_tokenizer, token_text, byte_char, eos_of

/* ---- the GGUF writer: a growing byte buffer for the header ---------------- */
static unsigned char *hb;
static size_t hn, hcap;
static void put(const void *p, size_t n) {
    if (hn + n > hcap) {
        hcap = (hn + n) * 2 + 4096;
        if (!(hb = (unsigned char *)realloc(hb, hcap))) die("out of memory%s%s", "", "");
    }
    memcpy(hb + hn, p, n);
    hn += n;
}
static void put_u32(uint32_t v) { put(&v, 4); } /* x86 and ARM: little endian, as GGUF */
static void put_u64(uint64_t v) { put(&v, 8); }
static void put_str(const char *s, size_t n) { put_u64(n), put(s, n); }
enum { G_U32 = 4, G_I32 = 5, G_F32 = 6, G_BOOL = 7, G_STRING = 8, G_ARRAY = 9 };
static int n_kv;
static void kv_key(const char *k, uint32_t type) { put_str(k, strlen(k)), put_u32(type), n_kv++; }
static void kv_u32(const char *k, uint32_t v) { kv_key(k, G_U32), put_u32(v); }
static void kv_f32(const char *k, float v) { kv_key(k, G_F32), put(&v, 4); }
static void kv_str(const char *k, const char *v) { kv_key(k, G_STRING), put_str(v, strlen(v)); }
static void kv_bool(const char *k, int v) { unsigned char b = (unsigned char)(v != 0); kv_key(k, G_BOOL), put(&b, 1); }

/* ---- the tokenizer: tokenizer.ggml.* from a tokenizer.json ----------------- */
enum { TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_USER = 4, TT_UNUSED = 5, TT_BYTE = 6 };
/* the name llama.cpp gives a byte-level file's split (its pre-tokenizer),
   from the kit's stages; NULL for one llama.cpp has no name for here */
static const char *pre_name(const trn_tokenizer *tok) {
    int n = tok->n_stages;
    const int *st = tok->stage;
    /* (TRN__PT_*: extras/train_data.h's stage names, seen here because this
       file holds the kit's implementation) */
    if (n == 1 && st[0] == TRN__PT_GPT2) return "gpt-2";     /* ByteLevel(use_regex) */
    if (n == 1 && st[0] == TRN__PT_LLAMA3) return "llama-bpe"; /* Split(Llama 3's) + ByteLevel */
    if (n == 1 && st[0] == TRN__PT_QWEN2) return "qwen2";
    if (n >= 2 && st[0] == TRN__PT_DIGIT1 && st[n - 1] == TRN__PT_GPT2 && (n == 2 || st[1] == TRN__PT_PREFIX))
        return "smollm"; /* Digits(individual) + ByteLevel */
    return NULL;
}
static void write_tokenizer(const trn_tokenizer *tok, const char *from) {
    static char text[4096];
    int V = tok->vocab_size, bytes = 0, specials = 0;
    int llama = !tok->byte_level, eos = eos_of(tok);
    const char *pre = llama ? NULL : pre_name(tok);
    kv_str("tokenizer.ggml.model", llama ? "llama" : "gpt2");
    if (!llama) {
        if (!pre) printf("note: %s: a split llama.cpp has no name for here: tokenizer.ggml.pre \"default\"\n", from);
        kv_str("tokenizer.ggml.pre", pre ? pre : "default");
    }
    kv_key("tokenizer.ggml.tokens", G_ARRAY), put_u32(G_STRING), put_u64((uint64_t)V);
    for (int id = 0; id < V; id++) {
        long n = token_text(tok, id, text, sizeof text);
        if (n < 0) n = snprintf(text, sizeof text, "[PAD%d]", id); /* as llama.cpp's converter names a hole */
        put_str(text, (size_t)n);
    }
    kv_key("tokenizer.ggml.token_type", G_ARRAY), put_u32(G_I32), put_u64((uint64_t)V);
    for (int id = 0; id < V; id++) {
        const trn_added_token *at = added_of(tok, id);
        int type = TT_NORMAL;
        if (token_text(tok, id, text, sizeof text) < 0) type = TT_UNUSED;
        else if (id == tok->unk_id) type = TT_UNKNOWN;
        else if (llama && tok->byte_fallback) /* "<0xNN>": the token byte fallback spells a byte with */
            for (int b = 0; b < 256 && type == TT_NORMAL; b++) type = tok->byte_token[b] == id ? TT_BYTE : type;
        if (type == TT_NORMAL && at) type = at->special ? TT_CONTROL : TT_USER; /* (a byte first, as the converter) */
        bytes += type == TT_BYTE, specials += type == TT_CONTROL;
        put_u32((uint32_t)type);
    }
    if (llama) {
        /* scores: llama.cpp's SentencePiece-style tokenizer merges the pair
           whose result scores highest. A BPE file has no scores, but its
           merge order is the same information: the token that merge r makes
           scores -r, so the earliest merge wins, as in the tokenizers
           package (a token no merge makes scores 0: it is a starting
           symbol, never a merge result). llama.cpp's own converter writes
           -1000 for every token of a tokenizer.json, which makes it merge
           by position instead. */
        float *score = (float *)malloc(sizeof(float) * (size_t)V);
        if (!score) die("out of memory%s%s", "", "");
        for (int id = 0; id < V; id++) score[id] = 1.0f; /* (1: no merge makes it yet) */
        for (size_t h = 0; h < tok->merges_cap; h++) { /* two merges may make one token: the earlier counts */
            const trn_bpe_merge *mg = &tok->merges[h];
            if (mg->left >= 0 && mg->id >= 0 && mg->id < V && (score[mg->id] > 0 || -(float)mg->rank > score[mg->id]))
                score[mg->id] = -(float)mg->rank;
        }
        for (int id = 0; id < V; id++) score[id] = score[id] > 0 ? 0.0f : score[id];
        kv_key("tokenizer.ggml.scores", G_ARRAY), put_u32(G_F32), put_u64((uint64_t)V);
        put(score, 4 * (size_t)V);
        free(score);
        kv_bool("tokenizer.ggml.add_space_prefix", tok->meta_norm || tok->meta_prepend != 0);
    } else { /* merges in rank order: the kit's table is hashed, so place each by its rank */
        int *left = (int *)malloc(sizeof(int) * (size_t)(tok->n_merges + 1)), *right;
        right = (int *)malloc(sizeof(int) * (size_t)(tok->n_merges + 1));
        if (!left || !right) die("out of memory%s%s", "", "");
        for (size_t h = 0; h < tok->merges_cap; h++)
            if (tok->merges[h].left >= 0) left[tok->merges[h].rank] = tok->merges[h].left, right[tok->merges[h].rank] = tok->merges[h].right;
        kv_key("tokenizer.ggml.merges", G_ARRAY), put_u32(G_STRING), put_u64((uint64_t)tok->n_merges);
        for (int r = 0; r < tok->n_merges; r++) {
            long a = token_text(tok, left[r], text, sizeof text), b;
            if (a < 0 || (size_t)a + 2 >= sizeof text) die("%s: a merge of a token without text%s", from, "");
            text[a] = ' ';
            b = token_text(tok, right[r], text + a + 1, sizeof text - (size_t)a - 1);
            if (b < 0) die("%s: a merge of a token without text%s", from, "");
            put_str(text, (size_t)(a + 1 + b));
        }
        free(left);
        free(right);
    }
    if (tok->bos_id >= 0) kv_u32("tokenizer.ggml.bos_token_id", (uint32_t)tok->bos_id);
    if (eos >= 0) kv_u32("tokenizer.ggml.eos_token_id", (uint32_t)eos);
    if (tok->unk_id >= 0) kv_u32("tokenizer.ggml.unknown_token_id", (uint32_t)tok->unk_id);
    kv_bool("tokenizer.ggml.add_bos_token", tok->bos_id >= 0);
    kv_bool("tokenizer.ggml.add_eos_token", tok->eos_id >= 0);
    printf("tokenizer: %s as a \"%s\" vocabulary%s%s: %d tokens (%d control, %d byte), %d merges, bos %d, eos %d\n",
           from, llama ? "llama" : "gpt2", pre ? ", pre " : "", pre ? pre : "", V, specials, bytes,
           llama ? 0 : tok->n_merges, tok->bos_id, eos);
}

/* ---- the tensors ------------------------------------------------------------ */
enum { T_F32 = 0, T_F16 = 1, T_BF16 = 30 };
typedef struct out_tensor {
    char name[96];
    int64_t rows, cols; /* cols 0: a vector of rows */
    int type;
    float *data;        /* rows * cols (or rows) floats, in the GGUF order */
} out_tensor;
static out_tensor *ts;
static int n_ts;

static uint16_t to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* NaN stays NaN */
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
/* IEEE half, round to nearest even; overflow -> inf */
static uint16_t to_f16(float f) {
    uint32_t u, sign, mant;
    int exp;
    memcpy(&u, &f, 4);
    sign = (u >> 16) & 0x8000u;
    exp = (int)((u >> 23) & 0xff) - 127 + 15;
    mant = u & 0x7fffffu;
    if (((u >> 23) & 0xff) == 0xff) return (uint16_t)(sign | 0x7c00u | (mant ? 0x200u : 0u));
    if (exp >= 31) return (uint16_t)(sign | 0x7c00u);
    if (exp <= 0) { /* subnormal or zero: shift the implicit 1 in, round */
        uint32_t m, shift, half, rest;
        if (exp < -10) return (uint16_t)sign;
        m = mant | 0x800000u;
        shift = (uint32_t)(14 - exp);
        half = 1u << (shift - 1);
        rest = m & ((1u << shift) - 1);
        m >>= shift;
        if (rest > half || (rest == half && (m & 1u))) m++;
        return (uint16_t)(sign | m);
    }
    {
        uint32_t h = sign | ((uint32_t)exp << 10) | (mant >> 13), rest = mant & 0x1fffu;
        if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h++; /* may carry into the exponent: right */
        return (uint16_t)h;
    }
}

static trn_safetensors src;
static out_tensor *add(const char *name, int64_t rows, int64_t cols, int type) {
    out_tensor *t;
    ts = (out_tensor *)realloc(ts, sizeof(out_tensor) * (size_t)(n_ts + 1));
    if (!ts) die("out of memory%s%s", "", "");
    t = &ts[n_ts++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->rows = rows, t->cols = cols, t->type = cols ? type : T_F32;
    t->data = (float *)malloc(sizeof(float) * (size_t)rows * (size_t)(cols ? cols : 1));
    if (!t->data) die("out of memory for %s%s", name, "");
    return t;
}
/* the kit's tensor `name` (n floats) into a new buffer */
static float *read_all(const char *name, size_t n) {
    const trn_st_tensor *t = trn_safetensors_find(&src, name);
    float *b;
    if (!t) die("%s: no tensor %s", src.path, name);
    if (t->numel != n) die("%s: tensor %s has another size than its metadata says", src.path, name);
    if (!(b = (float *)malloc(n * sizeof(float)))) die("out of memory for %s%s", name, "");
    if (trn_safetensors_read(&src, t, b) != TRN_OK) die("%s: %s", src.path, trn_error_reason());
    return b;
}
/* rows of q or k, per head of hs: HF's halves -> llama.cpp's neighbour pairs
   (row j*hs/2 + i of a head goes to row 2i + j) */
static void permute_rows(float *dst, const float *s, int heads, int hs, int64_t cols) {
    int h, i, j;
    for (h = 0; h < heads; h++)
        for (j = 0; j < 2; j++)
            for (i = 0; i < hs / 2; i++)
                memcpy(dst + ((size_t)h * hs + 2 * i + j) * cols, s + ((size_t)h * hs + (size_t)j * (hs / 2) + i) * cols,
                       sizeof(float) * (size_t)cols);
}

int main(int argc, char **argv) {
    int type = T_F32, a = 1;
    const char *tname = "f32";
    if (argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        printf("usage: export_gguf [--type f32|f16|bf16] [--tokenizer FILE] CKPT FILE   (a model of examples/llama -> "
               "GGUF for llama.cpp; the tokenizer.json: FILE, else the run's)\n");
        return 0;
    }
    const char *tok_flag = NULL;
    while (a + 1 < argc && (!strcmp(argv[a], "--type") || !strcmp(argv[a], "--tokenizer"))) {
        if (!strcmp(argv[a], "--tokenizer")) {
            tok_flag = argv[a + 1];
        } else {
            tname = argv[a + 1];
            type = !strcmp(tname, "f32") ? T_F32 : !strcmp(tname, "f16") ? T_F16 : !strcmp(tname, "bf16") ? T_BF16 : -1;
            if (type < 0) die("--type %s: f32, f16 or bf16%s", tname, "");
        }
        a += 2;
    }
    if (argc - a != 2) {
        fprintf(stderr, "usage: export_gguf [--type f32|f16|bf16] [--tokenizer FILE] CKPT FILE\n");
        return 2;
    }
    const char *ckpt = argv[a], *path = argv[a + 1];
    if (trn_safetensors_open(&src, ckpt) != TRN_OK) die("%s%s", trn_error_reason(), "");
    if (meta_long(&src, "llama.n_layer") <= 0)
        die("%s: not a model of examples/llama (no llama.* metadata)%s", ckpt, "");
    long L = meta_long(&src, "llama.n_layer"), NH = meta_long(&src, "llama.n_head"), NKV = meta_long(&src, "llama.n_kv_head");
    long C = meta_long(&src, "llama.n_embd"), hs = meta_long(&src, "llama.head_dim"), F = meta_long(&src, "llama.ffn_hidden");
    long maxT = meta_long(&src, "llama.block_size"), V = meta_long(&src, "llama.vocab_size"), Vp = meta_long(&src, "llama.padded_vocab");
    long tied = meta_long(&src, "llama.tied") == 1, rope = meta_long(&src, "llama.rope_type");
    float theta = (float)meta_double(&src, "llama.rope_theta", 10000.0), eps = (float)meta_double(&src, "llama.norm_eps", 1e-5);
    if (L <= 0 || NH <= 0 || NKV <= 0 || C <= 0 || hs <= 0 || hs % 2 || F <= 0 || maxT <= 0 || V <= 0 || Vp < V || NH % NKV)
        die("%s: its llama.* metadata is incomplete or inconsistent%s", ckpt, "");
    if (rope == 2) die("%s: dynamic RoPE scaling has no GGUF form (llama.cpp has linear, yarn and llama3's rope_freqs)%s", ckpt, "");
    if (rope > 3) die("%s: llama.rope_type %s is not one this tool knows", ckpt, trn_safetensors_meta(&src, "llama.rope_type"));
    trn_tokenizer tok;
    trn_tokenizer_init_bytes(&tok);
    const char *tok_path = run_tokenizer(&tok, &src, tok_flag);
    if (tok_path && tok.vocab_size != V) {
        char msg[96];
        snprintf(msg, sizeof msg, "has %d tokens, the model's vocabulary is %ld", tok.vocab_size, V);
        die("%s: %s (llama.cpp needs one token per row)", tok_path, msg);
    }

    /* tensors, in llama.cpp's names and order */
    char n[96], k[160];
    float *e = read_all("model.embed_tokens.weight", (size_t)Vp * C);
    memcpy(add("token_embd.weight", V, C, type)->data, e, sizeof(float) * (size_t)V * C); /* V of Vp rows */
    free(e);
    if (rope == 3) { /* llama3: the divisor of each pair's frequency */
        trn_rope_scaling sc;
        memset(&sc, 0, sizeof sc);
        sc.type = TRN_ROPE_LLAMA3;
        sc.factor = (float)meta_double(&src, "llama.rope_factor", 1.0);
        sc.low_freq_factor = (float)meta_double(&src, "llama.rope_low_freq_factor", 1.0);
        sc.high_freq_factor = (float)meta_double(&src, "llama.rope_high_freq_factor", 4.0);
        sc.original_max_pos = (int)meta_long(&src, "llama.rope_original_max_pos");
        out_tensor *rf = add("rope_freqs.weight", hs / 2, 0, T_F32);
        for (int i = 0; i < hs / 2; i++)
            rf->data[i] = (float)(trn_rope_inv_freq(i, (int)hs, theta, NULL, 0) / trn_rope_inv_freq(i, (int)hs, theta, &sc, 0));
    }
    for (long l = 0; l < L; l++) {
        size_t nq = (size_t)NH * hs * C, nkv = (size_t)NKV * hs * C;
#define SRC(what) (snprintf(k, sizeof k, "model.layers.%ld.%s", l, what), k)
#define DST(what) (snprintf(n, sizeof n, "blk.%ld.%s", l, what), n)
#define COPY(dst, srcname, rows, cols)                                                             \
        do {                                                                                       \
            float *s_ = read_all(SRC(srcname), (size_t)(rows) * (size_t)((cols) != 0 ? (cols) : 1));    \
            memcpy(add(DST(dst), rows, cols, type)->data, s_, sizeof(float) * (size_t)(rows) * (size_t)((cols) != 0 ? (cols) : 1)); \
            free(s_);                                                                              \
        } while (0)
        COPY("attn_norm.weight", "input_layernorm.weight", C, 0);
        float *qkv = read_all(SRC("self_attn.qkv_proj.weight"), nq + 2 * nkv);
        permute_rows(add(DST("attn_q.weight"), NH * hs, C, type)->data, qkv, (int)NH, (int)hs, C);
        permute_rows(add(DST("attn_k.weight"), NKV * hs, C, type)->data, qkv + nq, (int)NKV, (int)hs, C);
        memcpy(add(DST("attn_v.weight"), NKV * hs, C, type)->data, qkv + nq + nkv, sizeof(float) * nkv);
        free(qkv);
        COPY("attn_output.weight", "self_attn.o_proj.weight", C, NH * hs);
        COPY("ffn_norm.weight", "post_attention_layernorm.weight", C, 0);
        COPY("ffn_gate.weight", "mlp.gate_proj.weight", F, C);
        COPY("ffn_up.weight", "mlp.up_proj.weight", F, C);
        COPY("ffn_down.weight", "mlp.down_proj.weight", C, F);
#undef COPY
#undef DST
#undef SRC
    }
    float *s = read_all("model.norm.weight", (size_t)C);
    memcpy(add("output_norm.weight", C, 0, T_F32)->data, s, sizeof(float) * (size_t)C);
    free(s);
    if (!tied) {
        s = read_all("lm_head.weight", (size_t)Vp * C);
        memcpy(add("output.weight", V, C, type)->data, s, sizeof(float) * (size_t)V * C);
        free(s);
    }

    /* the header: magic, version, counts (the kv count patched at the end) */
    put("GGUF", 4);
    put_u32(3);
    put_u64((uint64_t)n_ts);
    size_t kv_count_at = hn;
    put_u64(0);
    kv_str("general.architecture", "llama");
    kv_str("general.name", "train.h llama");
    kv_u32("general.file_type", type == T_F32 ? 0 : type == T_F16 ? 1 : 32); /* ALL_F32, MOSTLY_F16, MOSTLY_BF16 */
    kv_u32("general.alignment", 32);
    kv_u32("llama.context_length", (uint32_t)maxT);
    kv_u32("llama.embedding_length", (uint32_t)C);
    kv_u32("llama.block_count", (uint32_t)L);
    kv_u32("llama.feed_forward_length", (uint32_t)F);
    kv_u32("llama.attention.head_count", (uint32_t)NH);
    kv_u32("llama.attention.head_count_kv", (uint32_t)NKV);
    kv_u32("llama.attention.key_length", (uint32_t)hs);
    kv_u32("llama.attention.value_length", (uint32_t)hs);
    kv_u32("llama.rope.dimension_count", (uint32_t)hs);
    kv_f32("llama.rope.freq_base", theta);
    kv_f32("llama.attention.layer_norm_rms_epsilon", eps);
    kv_u32("llama.vocab_size", (uint32_t)V);
    if (rope == 1) {
        kv_str("llama.rope.scaling.type", "linear");
        kv_f32("llama.rope.scaling.factor", (float)meta_double(&src, "llama.rope_factor", 1.0));
    }
    if (tok_path) {
        write_tokenizer(&tok, tok_path);
    } else if (V == 256) { /* the kit's bytes: GPT-2's byte-to-character map, no merges */
        char tok[8];
        kv_str("tokenizer.ggml.model", "gpt2");
        kv_str("tokenizer.ggml.pre", "default");
        kv_key("tokenizer.ggml.tokens", G_ARRAY), put_u32(G_STRING), put_u64(256);
        for (int b = 0; b < 256; b++) {
            int cp = byte_char(b), len = cp < 0x80 ? 1 : 2;
            if (len == 1) tok[0] = (char)cp;
            else tok[0] = (char)(0xC0 | (cp >> 6)), tok[1] = (char)(0x80 | (cp & 0x3F));
            put_str(tok, (size_t)len);
        }
        kv_key("tokenizer.ggml.token_type", G_ARRAY), put_u32(G_I32), put_u64(256);
        for (int b = 0; b < 256; b++) put_u32(1); /* NORMAL */
        kv_key("tokenizer.ggml.merges", G_ARRAY), put_u32(G_STRING), put_u64(0);
    } else {
        printf("%s (llama.cpp needs one to run a vocabulary of %ld)\n", tokenizer_note, V);
    }
    trn_tokenizer_free(&tok);
    memcpy(hb + kv_count_at, &(uint64_t){(uint64_t)n_kv}, 8);
    uint64_t off = 0;
    for (int i = 0; i < n_ts; i++) {
        out_tensor *t = &ts[i];
        size_t elems = (size_t)t->rows * (size_t)(t->cols ? t->cols : 1);
        put_str(t->name, strlen(t->name));
        if (t->cols) put_u32(2), put_u64((uint64_t)t->cols), put_u64((uint64_t)t->rows);
        else put_u32(1), put_u64((uint64_t)t->rows);
        put_u32((uint32_t)t->type);
        put_u64(off);
        off += (uint64_t)elems * (t->type == T_F32 ? 4 : 2);
        off = (off + 31) / 32 * 32;
    }
    while (hn % 32) put("", 1); /* the data section starts aligned */

    /* write: the header, then each tensor, padded; a temporary file renamed */
    char tmpp[1200];
    snprintf(tmpp, sizeof tmpp, "%s.tmp", path);
    FILE *fp = fopen(tmpp, "wb");
    if (!fp) die("%s: %s", tmpp, strerror(errno));
    int ok = fwrite(hb, 1, hn, fp) == hn;
    static const char zeros[32];
    for (int i = 0; i < n_ts && ok; i++) {
        out_tensor *t = &ts[i];
        size_t elems = (size_t)t->rows * (size_t)(t->cols ? t->cols : 1), bytes;
        if (t->type == T_F32) {
            bytes = elems * 4;
            ok = fwrite(t->data, 4, elems, fp) == elems;
        } else {
            uint16_t *h = (uint16_t *)malloc(elems * 2);
            if (!h) die("out of memory%s%s", "", "");
            for (size_t j = 0; j < elems; j++) h[j] = t->type == T_F16 ? to_f16(t->data[j]) : to_bf16(t->data[j]);
            bytes = elems * 2;
            ok = fwrite(h, 2, elems, fp) == elems;
            free(h);
        }
        if (ok && bytes % 32) ok = fwrite(zeros, 1, 32 - bytes % 32, fp) == 32 - bytes % 32;
    }
    if (fclose(fp) != 0 || !ok) { remove(tmpp); die("%s: write failed: %s", tmpp, strerror(errno)); }
    if (rename(tmpp, path) != 0) { remove(tmpp); die("%s: %s", path, strerror(errno)); }
    printf("wrote %s: GGUF v3, llama, %d tensors (%s), %d keys, %ld layers, vocabulary %ld%s%s\n", path, n_ts, tname, n_kv,
           L, V, tied ? ", tied head" : "", rope == 3 ? ", llama3 rope_freqs" : rope == 1 ? ", linear RoPE" : "");
    for (int i = 0; i < n_ts; i++) free(ts[i].data);
    free(ts);
    free(hb);
    trn_safetensors_close(&src);
    return 0;
}
