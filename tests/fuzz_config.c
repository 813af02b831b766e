/* tests/fuzz_config.c - fuzz target for a Hugging Face config.json as the
   kit reads it: train.h's one JSON reader (trn_json_parse and the >>json
   API) and examples/llama.c's config_from_hf_doc, the function behind
   `examples/llama --init DIR` (included here with LLAMA_NO_MAIN, so the
   target runs the example's own code, not a copy).

   One input = one config.json's text. It is parsed; an accepted document
   is walked with the typed reads (typeof, count, at, key, int, number,
   bool, string) down to a depth of 8; then the example reads it as a
   Llama config. Invariants of an accepted config (abort = a finding):
   every count in the range config_from_hf_doc documents (layers
   1..100000, heads 1..2^20 with the key/value heads dividing them,
   hidden, intermediate, vocab, head_dim, context 1..2^30, head_dim even),
   the padded vocab the vocab rounded up to 128 (kept at <= 256), rope_theta > 1
   and rms_norm_eps > 0 both finite, tied -1/0/1, and the RoPE scaling one
   trn_rope_scaled accepts (config_ok). Nothing may crash, leak or exit.

   Built two ways, as tests/fuzz_safetensors.c:
   - by tests/test_fuzz.sh with clang -fsanitize=fuzzer,address,undefined
     -DTRN_LIBFUZZER;
   - by build.sh as a plain program: --write-seeds DIR, FILE... (replay),
     --mutate N (its own small mutation loop, without libFuzzer).
*/
// requires: test -f examples/llama.c
#define LLAMA_NO_MAIN
#include "examples/llama.c"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#define FZ_ASSERT(c) do { if (!(c)) { fprintf(stderr, "fuzz invariant failed: %s\n", #c); abort(); } } while (0)

/* every typed read of every value the document holds (to depth 8): none
   may crash, and each answers by the value's type */
static void fz_walk(trn_json_value v, int depth) {
    static const char *const keys[] = {"num_hidden_layers", "hidden_size", "rope_scaling", "rope_type", "a", ""};
    trn_json_type t = trn_json_typeof(v);
    int64_t i64;
    double d;
    int b, i, n;
    char s[64];
    trn_result ri = trn_json_int(v, INT64_MIN, INT64_MAX, &i64), rd = trn_json_number(v, &d);
    FZ_ASSERT(ri != TRN_OK || t == TRN_JSON_NUMBER);
    FZ_ASSERT(rd != TRN_OK || (t == TRN_JSON_NUMBER && d == d)); /* never NaN */
    FZ_ASSERT(trn_json_bool(v, &b) != TRN_OK || (t == TRN_JSON_BOOL && (b == 0 || b == 1)));
    if (trn_json_string(v, s, sizeof s) == TRN_OK) FZ_ASSERT(t == TRN_JSON_STRING && strlen(s) < sizeof s);
    n = trn_json_count(v);
    FZ_ASSERT(n >= 0 && (n == 0 || t == TRN_JSON_ARRAY || t == TRN_JSON_OBJECT));
    if (depth >= 8) return;
    if (t == TRN_JSON_ARRAY) {
        for (i = 0; i < n && i < 64; i++) {
            trn_json_value e = trn_json_at(v, i);
            FZ_ASSERT(e.at != NULL);
            fz_walk(e, depth + 1);
        }
        FZ_ASSERT(trn_json_at(v, n).at == NULL && trn_json_at(v, -1).at == NULL);
    } else if (t == TRN_JSON_OBJECT) {
        for (i = 0; i < (int)(sizeof keys / sizeof keys[0]); i++) {
            trn_json_value k = trn_json_key(v, keys[i]);
            FZ_ASSERT(!!trn_json_has(v, keys[i]) == !!(k.at != NULL || k.twice));
            if (k.at) fz_walk(k, depth + 1);
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    trn_json doc;
    llama_config c;
    if (trn_json_parse(&doc, (const char *)data, size, "fuzz/config.json") != TRN_OK) {
        FZ_ASSERT(trn_ledger_current(TRN_HOST, TRN_KIND_TEMP) == 0);
        return 0;
    }
    fz_walk(trn_json_root(&doc), 0);
    if (config_from_hf_doc(&doc, "fuzz/config.json", &c) == TRN_OK) {
        llama_config sizes = c;
        FZ_ASSERT(c.n_layer >= 1 && c.n_layer <= 100000);
        FZ_ASSERT(c.n_head >= 1 && c.n_head <= (1 << 20) && c.n_kv_head >= 1 && c.n_kv_head <= (1 << 20));
        FZ_ASSERT(c.n_head % c.n_kv_head == 0);
        FZ_ASSERT(c.n_embd >= 1 && c.n_embd <= (1 << 30) && c.ffn_hidden >= 1 && c.ffn_hidden <= (1 << 30));
        FZ_ASSERT(c.head_dim >= 2 && c.head_dim <= (1 << 30) && c.head_dim % 2 == 0);
        FZ_ASSERT(c.vocab_size >= 1 && c.vocab_size <= (1 << 30));
        FZ_ASSERT(c.vocab_size <= 256 ? c.padded_vocab == c.vocab_size /* a byte vocabulary stays */
                                      : c.padded_vocab % 128 == 0 && c.padded_vocab - c.vocab_size < 128);
        FZ_ASSERT(c.block_size >= 1);
        FZ_ASSERT(isfinite(c.rope_theta) && c.rope_theta > 1.0f);
        FZ_ASSERT(isfinite(c.norm_eps) && c.norm_eps > 0.0f);
        FZ_ASSERT(c.tied == -1 || c.tied == 0 || c.tied == 1);
        FZ_ASSERT(rope_ok(&c.rope));
        sizes.tied = 0;
        FZ_ASSERT(config_ok(&sizes));
    }
    trn_json_free(&doc);
    FZ_ASSERT(trn_ledger_current(TRN_HOST, TRN_KIND_TEMP) == 0);
    return 0;
}

#ifndef TRN_LIBFUZZER
/* --- without libFuzzer: seeds, replay, a small mutation loop ----------- */
static const char *const seeds[] = {
    /* TinyLlama-1.1B's config.json (transformers 4.x) */
    "{\n  \"architectures\": [\"LlamaForCausalLM\"],\n  \"attention_bias\": false,\n  \"bos_token_id\": 1,\n"
    "  \"eos_token_id\": 2,\n  \"hidden_act\": \"silu\",\n  \"hidden_size\": 2048,\n  \"initializer_range\": 0.02,\n"
    "  \"intermediate_size\": 5632,\n  \"max_position_embeddings\": 2048,\n  \"model_type\": \"llama\",\n"
    "  \"num_attention_heads\": 32,\n  \"num_hidden_layers\": 22,\n  \"num_key_value_heads\": 4,\n"
    "  \"pretraining_tp\": 1,\n  \"rms_norm_eps\": 1e-05,\n  \"rope_scaling\": null,\n  \"rope_theta\": 10000.0,\n"
    "  \"tie_word_embeddings\": false,\n  \"torch_dtype\": \"bfloat16\",\n  \"transformers_version\": \"4.35.0\",\n"
    "  \"use_cache\": true,\n  \"vocab_size\": 32000\n}\n",
    /* Llama 3.1's RoPE (llama3 scaling), tied, explicit head_dim */
    "{\"hidden_size\": 64, \"intermediate_size\": 128, \"num_attention_heads\": 4, \"num_hidden_layers\": 2, "
    "\"num_key_value_heads\": 2, \"head_dim\": 16, \"vocab_size\": 300, \"max_position_embeddings\": 128, "
    "\"rms_norm_eps\": 1e-5, \"rope_theta\": 500000.0, \"tie_word_embeddings\": true, \"mlp_bias\": false, "
    "\"rope_scaling\": {\"factor\": 8.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, "
    "\"original_max_position_embeddings\": 8192, \"rope_type\": \"llama3\"}}",
    /* transformers 5.x: rope_parameters; dynamic scaling; linear as "type" */
    "{\"hidden_size\": 32, \"intermediate_size\": 64, \"num_attention_heads\": 2, \"num_hidden_layers\": 1, "
    "\"vocab_size\": 256, \"rope_parameters\": {\"rope_type\": \"dynamic\", \"factor\": 2.0, \"rope_theta\": 1e6}}",
    "{\"hidden_size\": 32, \"intermediate_size\": 64, \"num_attention_heads\": 2, \"num_hidden_layers\": 1, "
    "\"vocab_size\": 256, \"rope_scaling\": {\"type\": \"linear\", \"factor\": 4}, \"max_position_embeddings\": null}",
    /* refused ones: the lenient reads, nesting, escapes, numbers */
    "{\"hidden_size\": 32.7, \"intermediate_size\": 64, \"num_attention_heads\": 1e9, \"num_hidden_layers\": "
    "4294967298, \"vocab_size\": 256, \"rms_norm_eps\": NaN}",
    "{\"text_config\": {\"hidden_size\": 32, \"num_hidden_layers\": 1}, \"hidden_size\": 32, \"hidden_size\": 64, "
    "\"hidden_act\": \"gelu\\u00e9\\ud83d\\ude00\", \"x\": [[], {}, [1, -2.5e+3, true, false, null, \"\\\"\\\\\\/\\b\\f\\n\\r\\t\"]]}",
    /* findings of this target, kept as regressions: rope_parameters' own
       rope_theta escaped the range check (0 was accepted); dynamic scaling
       of a 2^30 context overflowed the int context */
    "{\"hidden_size\": 32, \"intermediate_size\": 64, \"num_attention_heads\": 2, \"num_hidden_layers\": 1, "
    "\"vocab_size\": 256, \"rope_parameters\": {\"rope_type\": \"dynamic\", \"factor\": 1.0, \"rope_theta\": 0e6}}",
    "{\"hidden_size\": 32, \"intermediate_size\": 64, \"num_attention_heads\": 2, \"num_hidden_layers\": 1, "
    "\"vocab_size\": 256, \"max_position_embeddings\": 1073741824, \"rope_scaling\": {\"rope_type\": \"dynamic\", "
    "\"factor\": 1000}}",
    "[1, 2, 3]",
    "not json at all"};

/* the shared main: --write-seeds, --mutate, replay (tests/fuzz_main.h) */
#define FZ_NAME "fuzz_config"
#define FZ_CAP (1 << 14)
#define FZ_STRING_SEEDS seeds
#define FZ_SEED_FILE "config%d.json"
static const unsigned char fz_interesting[] = {0, '"', '\\', '{', '}', '[', ']', ',', ':', '0', '1', '9', '-',
                                               'e', '.', 'u', ' ', 0x7f, 0x80, 0xc3, 0xed, 0xf4, 0xff};
#include "tests/fuzz_main.h"
#endif
