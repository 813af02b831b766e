/* tools/export_hf.c - a model trained here, out to Hugging Face transformers:
   DIR/config.json + DIR/model.safetensors in transformers' own layout, so
   that AutoModelForCausalLM.from_pretrained(DIR) loads it as it is.

     tools/export_hf [--tokenizer FILE] CKPT DIR

   CKPT: a model.safetensors or a ckpt_*.safetensors written by
   examples/gpt2 or examples/llama (their gpt2.* / llama.* metadata say the
   shape). What changes on the way out:
     both    the vocabulary unpadded: the kit keeps V rounded up to 128 rows
             for its matmuls; transformers has exactly vocab_size
     llama   qkv_proj (q, k, v stacked: one matmul here) split back into
             q_proj, k_proj, v_proj; a tied model (llama.tied) writes no
             lm_head and says tie_word_embeddings true; a scaled RoPE is
             written as transformers 4.x's rope_scaling (5.x reads it too)
     gpt2    the matrices transposed into HF's Conv1D layout (in,out): the
             kit's are (out,in) like nn.Linear; the head is wte (tied)
   The safetensors metadata says {"format": "pt"}, which transformers asks of
   every file.
   The tokenizer: the tokenizer.json the run used (--tokenizer FILE, else the
   checkpoint's run.tokenizer when that file exists; tools/export_common.h,
   run_tokenizer, says where else it looks) is copied into DIR byte
   for byte, after the kit has loaded it and checked that its ids fit the
   model's vocabulary. Beside it a small tokenizer_config.json: transformers
   (5.24, checked) loads a bare tokenizer.json with AutoTokenizer, ids and
   all, but then knows no bos_token or eos_token (generate() stops on the
   EOS); the file says PreTrainedTokenizerFast (tokenizer.json taken as it
   is), the BOS/EOS/UNK of the file (tools/export_common.h, eos_of), and no
   clean-up of spaces when decoding (so that decode gives
   what the tokenizers package gives). Without a tokenizer one line says so.
   Exit status: 0 written, 2 bad input (one line on stderr). */
#define TRAIN_IMPLEMENTATION
#include "train.h"
#include "extras/train_data.h" // the tokenizer.json reader

#define EXPORT_PROG "export_hf"
#include "export_common.h" // die, meta_long, meta_double, run_tokenizer, token_text

static trn_safetensors src;
static trn_model out;
static float *buf, *tmp;

/* tensor `name` of the source into buf, which must hold `n` floats */
static void read_src(const char *name, size_t n) {
    const trn_st_tensor *t = trn_safetensors_find(&src, name);
    if (!t) die("%s: no tensor %s", src.path, name);
    if (t->numel != n) die("%s: tensor %s has another size than its metadata says", src.path, name);
    if (trn_safetensors_read(&src, t, buf) != TRN_OK) die("%s: %s", src.path, trn_error_reason());
}
/* buf (rows, cols) -> a new output tensor `name`, transposed when asked */
static void put(const char *name, int rows, int cols, int transpose) {
    int d0 = transpose ? cols : rows, d1 = transpose ? rows : cols;
    trn_tensor *p = cols ? trn_param2(&out, name, d0, d1) : trn_param1(&out, name, rows);
    (void)p;
}

/* a JSON string: quotes, backslash and control characters escaped, the
   rest (UTF-8) as it is */
static void json_str(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fputc('\\', f), fputc(c, f);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}
/* DIR/tokenizer.json: the file, byte for byte; DIR/tokenizer_config.json
   (see the top) */
static void write_tokenizer(const trn_tokenizer *tok, const char *from, const char *dir) {
    char path[1200], text[4096];
    static char chunk[1 << 16];
    size_t n;
    FILE *in = fopen(from, "rb"), *out;
    int ok = 1, ids[3] = {tok->bos_id, eos_of(tok), tok->unk_id};
    static const char *keys[3] = {"bos_token", "eos_token", "unk_token"};
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    if (!in) die("%s: %s", from, strerror(errno));
    if (!(out = fopen(path, "wb"))) die("%s: %s", path, strerror(errno));
    while ((n = fread(chunk, 1, sizeof chunk, in)) > 0) ok &= fwrite(chunk, 1, n, out) == n;
    ok &= !ferror(in);
    fclose(in);
    if (fclose(out) != 0 || !ok) die("%s: write failed: %s", path, strerror(errno));
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    if (!(out = fopen(path, "w"))) die("%s: %s", path, strerror(errno));
    fprintf(out, "{\n  \"tokenizer_class\": \"PreTrainedTokenizerFast\",\n");
    for (int k = 0; k < 3; k++)
        if (ids[k] >= 0 && token_text(tok, ids[k], text, sizeof text) >= 0) {
            fprintf(out, "  \"%s\": ", keys[k]);
            json_str(out, text);
            fprintf(out, ",\n");
        }
    fprintf(out, "  \"clean_up_tokenization_spaces\": false\n}\n");
    if (fclose(out) != 0) die("%s: %s", path, strerror(errno));
    printf("wrote %s/tokenizer.json (copied from %s, %d tokens) and %s/tokenizer_config.json\n", dir, from,
           tok->vocab_size, dir);
}

int main(int argc, char **argv) {
    const char *tok_flag = NULL;
    int a = 1;
    if (argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        printf("usage: export_hf [--tokenizer FILE] CKPT DIR   (a model of examples/gpt2 or examples/llama -> "
               "transformers' layout; the tokenizer.json: FILE, else the run's)\n");
        return 0;
    }
    if (argc >= 3 && !strcmp(argv[1], "--tokenizer")) tok_flag = argv[2], a = 3;
    if (argc - a != 2) {
        fprintf(stderr, "usage: export_hf [--tokenizer FILE] CKPT DIR\n");
        return 2;
    }
    const char *ckpt = argv[a], *dir = argv[a + 1];
    if (trn_safetensors_open(&src, ckpt) != TRN_OK) die("%s%s", trn_error_reason(), "");
    int llama = meta_long(&src, "llama.n_layer") > 0, gpt2 = meta_long(&src, "gpt2.n_layer") > 0;
    if (!llama && !gpt2) die("%s: not a model of examples/gpt2 or examples/llama (no gpt2.* / llama.* metadata)%s", ckpt, "");
    const char *pre = llama ? "llama." : "gpt2.";
    char key[64];
#define M(k) (snprintf(key, sizeof key, "%s%s", pre, k), meta_long(&src, key))
    long L = M("n_layer"), NH = M("n_head"), C = M("n_embd"), maxT = M("block_size"), V = M("vocab_size"), Vp = M("padded_vocab");
    long NKV = llama ? M("n_kv_head") : NH, hs = llama ? M("head_dim") : (NH > 0 ? C / NH : 0), F = llama ? M("ffn_hidden") : 4 * C;
    long tied = llama ? M("tied") == 1 : 1;
#undef M
    if (L <= 0 || NH <= 0 || C <= 0 || maxT <= 0 || V <= 0 || Vp < V || NKV <= 0 || hs <= 0 || F <= 0 || NH % NKV)
        die("%s: its %s* metadata is incomplete or inconsistent", ckpt, pre);
    trn_tokenizer tok;
    trn_tokenizer_init_bytes(&tok);
    const char *tok_path = run_tokenizer(&tok, &src, tok_flag);
    if (tok_path && tok.vocab_size > V) {
        char msg[96];
        snprintf(msg, sizeof msg, "has ids up to %d, the model's vocabulary is %ld", tok.vocab_size - 1, V);
        die("%s: %s", tok_path, msg);
    }
    if (trn_mkdirs(dir) != TRN_OK) die("%s: %s", dir, trn_error_reason());
    trn_model_init(&out, NULL);
    size_t most = (size_t)Vp * C;
    size_t qkv = (size_t)(NH + 2 * NKV) * hs * C;
    if (qkv > most) most = qkv;
    if ((size_t)F * C > most) most = (size_t)F * C;
    if ((size_t)maxT * C > most) most = (size_t)maxT * C;
    buf = (float *)malloc(most * sizeof(float));
    tmp = (float *)malloc(most * sizeof(float));
    if (!buf || !tmp) die("out of memory for %s%s", ckpt, "");

    /* 1. the output model's tensors, in transformers' names and shapes */
    char n[160];
    if (llama) {
        put("model.embed_tokens.weight", (int)V, (int)C, 0);
        for (long l = 0; l < L; l++) {
#define P(what, r, c) (snprintf(n, sizeof n, "model.layers.%ld.%s", l, what), put(n, (int)(r), (int)(c), 0))
            P("input_layernorm.weight", C, 0);
            P("self_attn.q_proj.weight", NH * hs, C);
            P("self_attn.k_proj.weight", NKV * hs, C);
            P("self_attn.v_proj.weight", NKV * hs, C);
            P("self_attn.o_proj.weight", C, NH * hs);
            P("post_attention_layernorm.weight", C, 0);
            P("mlp.gate_proj.weight", F, C);
            P("mlp.up_proj.weight", F, C);
            P("mlp.down_proj.weight", C, F);
#undef P
        }
        put("model.norm.weight", (int)C, 0, 0);
        if (!tied) put("lm_head.weight", (int)V, (int)C, 0);
    } else {
        put("wte.weight", (int)V, (int)C, 0);
        put("wpe.weight", (int)maxT, (int)C, 0);
        for (long l = 0; l < L; l++) {
#define P(what, r, c, t) (snprintf(n, sizeof n, "h.%ld.%s", l, what), put(n, (int)(r), (int)(c), t))
            P("ln_1.weight", C, 0, 0); P("ln_1.bias", C, 0, 0);
            P("attn.c_attn.weight", 3 * C, C, 1); P("attn.c_attn.bias", 3 * C, 0, 0);
            P("attn.c_proj.weight", C, C, 1); P("attn.c_proj.bias", C, 0, 0);
            P("ln_2.weight", C, 0, 0); P("ln_2.bias", C, 0, 0);
            P("mlp.c_fc.weight", 4 * C, C, 1); P("mlp.c_fc.bias", 4 * C, 0, 0);
            P("mlp.c_proj.weight", C, 4 * C, 1); P("mlp.c_proj.bias", C, 0, 0);
#undef P
        }
        put("ln_f.weight", (int)C, 0, 0);
        put("ln_f.bias", (int)C, 0, 0);
    }
    if (trn_model_alloc(&out) != TRN_OK) die("out of memory: %s%s", trn_error_reason(), "");

    /* 2. fill them: the kit's tensor (same name, or qkv_proj) -> the new one */
    for (int i = 0; i < out.n_params; i++) {
        trn_tensor *p = out.params[i];
        const char *q = strstr(p->name, "_proj.weight");
        if (llama && q && (q[-1] == 'q' || q[-1] == 'k' || q[-1] == 'v') && q[-2] == '.') {
            /* rows [0, NH*hs) q, then NKV*hs of k, then NKV*hs of v */
            char name[160];
            snprintf(name, sizeof name, "%.*sqkv_proj.weight", (int)(q - 1 - p->name), p->name);
            read_src(name, qkv);
            size_t off = q[-1] == 'q' ? 0 : q[-1] == 'k' ? (size_t)NH * hs * C : (size_t)(NH + NKV) * hs * C;
            trn_write(&out, p, buf + off);
        } else if (!strcmp(p->name, "model.embed_tokens.weight") || !strcmp(p->name, "lm_head.weight") ||
                   !strcmp(p->name, "wte.weight")) {
            read_src(p->name, (size_t)Vp * C); /* Vp rows here, the first V out */
            trn_write(&out, p, buf);
        } else if (!llama && p->ndim == 2 && strcmp(p->name, "wpe.weight")) {
            int rows = p->shape[1], cols = p->shape[0]; /* the kit's (out,in) */
            read_src(p->name, (size_t)rows * cols);
            for (int r = 0; r < rows; r++)
                for (int c = 0; c < cols; c++) tmp[(size_t)c * rows + r] = buf[(size_t)r * cols + c];
            trn_write(&out, p, tmp);
        } else {
            read_src(p->name, p->size);
            trn_write(&out, p, buf);
        }
    }

    /* 3. model.safetensors and config.json */
    trn_meta meta;
    memset(&meta, 0, sizeof meta);
    trn_meta_set(&meta, "format", "pt");
    char path[1200];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (trn_safetensors_save(path, &out, &meta) != TRN_OK) die("%s: %s", path, trn_error_reason());
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *cf = fopen(path, "w");
    if (!cf) die("%s: %s", path, strerror(errno));
    if (llama) {
        long type = meta_long(&src, "llama.rope_type"), omax = meta_long(&src, "llama.rope_original_max_pos");
        static const char *names[] = {"default", "linear", "dynamic", "llama3"};
        double factor = meta_double(&src, "llama.rope_factor", 1.0);
        long max_pos = type == 2 ? omax : maxT; /* dynamic: the kit's context is factor x the config's */
        char rope[400] = "null";
        if (type == 1 || type == 2)
            snprintf(rope, sizeof rope, "{\"rope_type\": \"%s\", \"factor\": %.9g}", names[type], factor);
        else if (type == 3)
            snprintf(rope, sizeof rope, "{\"rope_type\": \"llama3\", \"factor\": %.9g, \"low_freq_factor\": %.9g, "
                     "\"high_freq_factor\": %.9g, \"original_max_position_embeddings\": %ld}", factor,
                     meta_double(&src, "llama.rope_low_freq_factor", 1.0), meta_double(&src, "llama.rope_high_freq_factor", 4.0), omax);
        else if (type > 3)
            die("%s: llama.rope_type %s is not one this tool knows", ckpt, trn_safetensors_meta(&src, "llama.rope_type"));
        fprintf(cf, "{\n  \"architectures\": [\"LlamaForCausalLM\"],\n  \"model_type\": \"llama\",\n"
                    "  \"hidden_size\": %ld,\n  \"intermediate_size\": %ld,\n  \"num_hidden_layers\": %ld,\n"
                    "  \"num_attention_heads\": %ld,\n  \"num_key_value_heads\": %ld,\n  \"head_dim\": %ld,\n"
                    "  \"vocab_size\": %ld,\n  \"max_position_embeddings\": %ld,\n  \"rms_norm_eps\": %.9g,\n"
                    "  \"rope_theta\": %.9g,\n  \"rope_scaling\": %s,\n  \"hidden_act\": \"silu\",\n"
                    "  \"attention_bias\": false,\n  \"mlp_bias\": false,\n  \"tie_word_embeddings\": %s,\n"
                    "  \"torch_dtype\": \"float32\"\n}\n",
                C, F, L, NH, NKV, hs, V, max_pos, meta_double(&src, "llama.norm_eps", 1e-5),
                meta_double(&src, "llama.rope_theta", 10000.0), rope, tied ? "true" : "false");
    } else {
        fprintf(cf, "{\n  \"architectures\": [\"GPT2LMHeadModel\"],\n  \"model_type\": \"gpt2\",\n"
                    "  \"n_embd\": %ld,\n  \"n_head\": %ld,\n  \"n_layer\": %ld,\n  \"n_positions\": %ld,\n"
                    "  \"n_ctx\": %ld,\n  \"vocab_size\": %ld,\n  \"layer_norm_epsilon\": 1e-05,\n"
                    "  \"activation_function\": \"gelu_new\",\n  \"tie_word_embeddings\": true,\n"
                    "  \"torch_dtype\": \"float32\"\n}\n",
                C, NH, L, maxT, maxT, V);
    }
    if (fclose(cf) != 0) die("%s: %s", path, strerror(errno));
    printf("wrote %s/config.json and %s/model.safetensors (%s, %ld layers, vocabulary %ld%s)\n", dir, dir,
           llama ? "LlamaForCausalLM" : "GPT2LMHeadModel", L, V, tied ? ", tied head" : "");
    if (tok_path) write_tokenizer(&tok, tok_path, dir);
    else printf("%s\n", tokenizer_note);
    trn_tokenizer_free(&tok);
    trn_model_free(&out);
    trn_safetensors_close(&src);
    free(buf);
    free(tmp);
    return 0;
}
