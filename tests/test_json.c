/* tests/test_json.c - the kit's one JSON reader (train.h's >>json): whole
   documents checked strictly, then values read by key with their type and
   range checked. The safetensors header and vocab.json use the same
   reader; test_checkpoint, test_data and the fuzz test cover those. */
#define TRAIN_IMPLEMENTATION
#include "train.h"
#include "extras/train_json.h"
#include "tests/check.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static trn_result parse(trn_json *doc, const char *text) {
    return trn_json_parse(doc, text, strlen(text), "t.json");
}

/* does the text parse? (freed again) */
static trn_result parse_rc(const char *text) {
    trn_json doc;
    trn_result r = parse(&doc, text);
    trn_json_free(&doc);
    return r;
}

/* the integer at top-level key k of text, read into [lo, hi] */
static trn_result int_of(const char *text, const char *k, int64_t lo, int64_t hi, int64_t *out) {
    trn_json doc;
    trn_result r = parse(&doc, text);
    if (r == TRN_OK) r = trn_json_int(trn_json_key(trn_json_root(&doc), k), lo, hi, out);
    trn_json_free(&doc);
    return r;
}

static void test_malformed(void) {
    static const char *bad[] = {
        "", "   ", "{", "}", "[1,]", "{\"a\":1,}", "{\"a\" 1}", "{a:1}", "{\"a\":1}}", "{\"a\":1} x",
        "{\"a\":1}{}", "[1 2]", "01", "-", "1.", ".5", "1e", "+1", "tru", "nul", "NaN", "Infinity",
        "\"abc", "\"a\\x\"", "\"\\u12\"", "\"\\uZZZZ\"", "\"tab\there\"", "\"\xC3\"", "\"\xC0\xAF\"",
        "\"\xED\xA0\x80\"", "\"\\ud83d\"", "\"\\ude00\"", "\"\\ud83d\\u0041\"", "// c\n1",
        "{\"a\":[1,{\"b\":[}]}"};
    size_t i;
    for (i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK(parse_rc(bad[i]) == TRN_ERR_FORMAT, "malformed #%zu '%s' is refused\n", i, bad[i]);
    {   /* a NUL byte inside the text, and text after it */
        trn_json doc;
        CHECK(trn_json_parse(&doc, "[1]\0 ", 5, "t.json") == TRN_ERR_FORMAT, "a NUL byte after the value\n");
        CHECK(strstr(trn_error_reason(), "t.json") && strstr(trn_error_reason(), "byte 3"),
              "the reason names the file and the byte: %s\n", trn_error_reason());
    }
    {   /* nesting: 64 levels are fine, 70 are refused, never a stack overflow */
        char deep[300];
        int k;
        for (k = 0; k < 64; k++) deep[k] = '[';
        for (k = 0; k < 64; k++) deep[64 + k] = ']';
        deep[128] = 0;
        CHECK(parse_rc(deep) == TRN_OK, "64 levels of arrays\n");
        for (k = 0; k < 140; k++) deep[k] = k < 70 ? '[' : ']';
        deep[140] = 0;
        CHECK(parse_rc(deep) == TRN_ERR_FORMAT, "70 levels are refused\n");
    }
    static const char *good[] = {"0", "-0", "1.5e-3", "1E+2", "true", "null", "\"\"", "[]", "{}", " [ 1 , [ ] , { } ] ",
                                 "\xEF\xBB\xBF{\"bom\": 1}", "{\"a\":{\"a\":{\"a\":[]}}}", "\"\\u0000\""};
    for (i = 0; i < sizeof good / sizeof good[0]; i++)
        CHECK(parse_rc(good[i]) == TRN_OK, "valid #%zu '%s' is read: %s\n", i, good[i], trn_error_reason());
}

static void test_config(void) {
    static const char *cfg =
        "{\n"
        "  \"architectures\": [\"LlamaForCausalLM\"],\n"
        "  \"rope_scaling\": {\"factor\": 8.0, \"rope_type\": \"llama3\", \"num_hidden_layers\": 99},\n"
        "  \"num_hidden_layers\": 16,\n"
        "  \"hidden_act\": \"silu\",\n"
        "  \"rms_norm_eps\": 1e-05,\n"
        "  \"tie_word_embeddings\": true,\n"
        "  \"eos_token_id\": [128001, 128008, 128009],\n"
        "  \"bos_token_id\": -1,\n"
        "  \"big\": 4294967298,\n"
        "  \"huge\": 123456789012345678901234567890,\n"
        "  \"frac\": 32.7,\n"
        "  \"exp\": 1e3,\n"
        "  \"int64_min\": -9223372036854775808,\n"
        "  \"esc\": \"a\\\"b\\\\c\\/d\\n\\u00e9\\ud83d\\ude00\\u20ac\",\n"
        "  \"n\\u0061me\": \"escaped key\",\n"
        "  \"nothing\": null\n"
        "}\n";
    trn_json doc;
    trn_json_value root, rs;
    int64_t v = 7;
    double d = 0;
    int b = 0;
    char s[64];
    CHECK(parse(&doc, cfg) == TRN_OK, "config parses: %s\n", trn_error_reason());
    root = trn_json_root(&doc);
    CHECK(trn_json_typeof(root) == TRN_JSON_OBJECT, "root is an object\n");
    CHECK(trn_json_count(root) == 16, "16 members (%d)\n", trn_json_count(root));
    CHECK(trn_json_int(trn_json_key(root, "num_hidden_layers"), 1, 1024, &v) == TRN_OK && v == 16,
          "top-level num_hidden_layers is 16, not the nested 99 (%lld)\n", (long long)v);
    CHECK(!trn_json_has(root, "factor") && !trn_json_has(root, "rope_type"), "nested keys are not top-level\n");
    rs = trn_json_key(root, "rope_scaling");
    CHECK(trn_json_typeof(rs) == TRN_JSON_OBJECT, "rope_scaling is an object\n");
    CHECK(trn_json_number(trn_json_key(rs, "factor"), &d) == TRN_OK && d == 8.0, "rope_scaling.factor = 8\n");
    CHECK(trn_json_string(trn_json_key(rs, "rope_type"), s, sizeof s) == TRN_OK && !strcmp(s, "llama3"), "rope_type\n");
    CHECK(trn_json_number(trn_json_key(root, "rms_norm_eps"), &d) == TRN_OK && d == 1e-05, "rms_norm_eps\n");
    CHECK(trn_json_bool(trn_json_key(root, "tie_word_embeddings"), &b) == TRN_OK && b == 1, "bool\n");
    CHECK(trn_json_string(trn_json_key(root, "hidden_act"), s, sizeof s) == TRN_OK && !strcmp(s, "silu"), "string\n");
    CHECK(trn_json_typeof(trn_json_key(root, "nothing")) == TRN_JSON_NULL, "null\n");
    CHECK(trn_json_has(root, "name"), "an escaped key is found by its decoded text\n");
    /* arrays */
    {
        trn_json_value eos = trn_json_key(root, "eos_token_id");
        CHECK(trn_json_count(eos) == 3, "3 eos ids\n");
        CHECK(trn_json_int(trn_json_at(eos, 2), 0, 1 << 30, &v) == TRN_OK && v == 128009, "eos[2]\n");
        CHECK(trn_json_typeof(trn_json_at(eos, 3)) == TRN_JSON_NONE, "eos[3] is none\n");
        CHECK(trn_json_string(trn_json_at(trn_json_key(root, "architectures"), 0), s, sizeof s) == TRN_OK &&
                  !strcmp(s, "LlamaForCausalLM"), "architectures[0]\n");
    }
    /* escapes: \" \\ \/ \n, U+00E9, a surrogate pair U+1F600, U+20AC */
    CHECK(trn_json_string(trn_json_key(root, "esc"), s, sizeof s) == TRN_OK &&
              !strcmp(s, "a\"b\\c/d\n\xC3\xA9\xF0\x9F\x98\x80\xE2\x82\xAC"), "escapes decode to UTF-8: '%s'\n", s);
    CHECK(trn_json_string(trn_json_key(root, "esc"), s, 8) == TRN_ERR_FORMAT, "a string longer than its buffer\n");
    /* integers are exact or refused, and nothing is written on error */
    v = 7;
    CHECK(trn_json_int(trn_json_key(root, "big"), 0, INT32_MAX, &v) == TRN_ERR_FORMAT && v == 7, "4294967298 > int32\n");
    CHECK(strstr(trn_error_reason(), "big") && strstr(trn_error_reason(), "4294967298"), "reason: %s\n", trn_error_reason());
    CHECK(trn_json_int(trn_json_key(root, "big"), 0, INT64_MAX, &v) == TRN_OK && v == 4294967298LL, "fits int64\n");
    CHECK(trn_json_int(trn_json_key(root, "huge"), INT64_MIN, INT64_MAX, &v) == TRN_ERR_FORMAT, "past int64\n");
    CHECK(trn_json_int(trn_json_key(root, "frac"), 0, 100, &v) == TRN_ERR_FORMAT, "32.7 is not an integer\n");
    CHECK(trn_json_number(trn_json_key(root, "frac"), &d) == TRN_OK && d == 32.7, "32.7 as a number\n");
    CHECK(trn_json_int(trn_json_key(root, "exp"), 0, 10000, &v) == TRN_ERR_FORMAT, "1e3 is not an integer\n");
    CHECK(trn_json_int(trn_json_key(root, "bos_token_id"), 0, 10, &v) == TRN_ERR_FORMAT, "-1 below 0\n");
    CHECK(trn_json_int(trn_json_key(root, "bos_token_id"), -1, 10, &v) == TRN_OK && v == -1, "-1 in [-1, 10]\n");
    CHECK(trn_json_int(trn_json_key(root, "int64_min"), INT64_MIN, 0, &v) == TRN_OK && v == INT64_MIN, "INT64_MIN\n");
    /* missing, wrong type */
    CHECK(trn_json_int(trn_json_key(root, "head_dim"), 1, 512, &v) == TRN_ERR_MISMATCH, "missing key\n");
    CHECK(strstr(trn_error_reason(), "head_dim") != NULL, "the reason names the key: %s\n", trn_error_reason());
    CHECK(trn_json_int(trn_json_key(root, "hidden_act"), 0, 9, &v) == TRN_ERR_FORMAT, "a string is not an int\n");
    CHECK(trn_json_bool(trn_json_key(root, "num_hidden_layers"), &b) == TRN_ERR_FORMAT, "a number is not a bool\n");
    CHECK(trn_json_string(trn_json_key(root, "nothing"), s, sizeof s) == TRN_ERR_FORMAT, "null is not a string\n");
    CHECK(trn_json_typeof(trn_json_key(trn_json_key(root, "hidden_act"), "x")) == TRN_JSON_NONE, "key of a string\n");
    trn_json_free(&doc);
    /* a key given twice is refused when read */
    CHECK(parse(&doc, "{\"a\": 1, \"b\": {\"a\": 3}, \"a\": 2}") == TRN_OK, "duplicate keys parse\n");
    CHECK(trn_json_int(trn_json_key(trn_json_root(&doc), "a"), 0, 9, &v) == TRN_ERR_FORMAT, "'a' twice is refused\n");
    CHECK(trn_json_int(trn_json_key(trn_json_key(trn_json_root(&doc), "b"), "a"), 0, 9, &v) == TRN_OK && v == 3, "b.a\n");
    trn_json_free(&doc);
    CHECK(int_of("{\"k\": 0}", "k", 0, 0, &v) == TRN_OK && v == 0, "0 in [0, 0]\n");
    CHECK(int_of("{\"k\": -0}", "k", 0, 0, &v) == TRN_OK && v == 0, "-0 is 0\n");
    CHECK(int_of("{\"k\": 9223372036854775807}", "k", 0, INT64_MAX, &v) == TRN_OK && v == INT64_MAX, "INT64_MAX\n");
    CHECK(int_of("{\"k\": 9223372036854775808}", "k", 0, INT64_MAX, &v) == TRN_ERR_FORMAT, "INT64_MAX + 1\n");
    CHECK(int_of("{\"k\": 32.0}", "k", 0, 100, &v) == TRN_ERR_FORMAT, "32.0 is not an integer either\n");
}

static void test_load(void) {
    char dir[] = "/tmp/test_json_XXXXXX", path[128];
    trn_json doc;
    FILE *f;
    int64_t v = 0;
    if (!mkdtemp(dir)) { CHECK(0, "mkdtemp\n"); return; }
    snprintf(path, sizeof path, "%s/config.json", dir);
    f = fopen(path, "wb");
    fputs("{\"n_layer\": 12}\n", f);
    fclose(f);
    CHECK(trn_json_load(&doc, path) == TRN_OK, "load: %s\n", trn_error_reason());
    CHECK(trn_json_int(trn_json_key(trn_json_root(&doc), "n_layer"), 1, 100, &v) == TRN_OK && v == 12, "n_layer\n");
    trn_json_free(&doc);
    f = fopen(path, "wb");
    fputs("{\"n_layer\": 12,}\n", f);
    fclose(f);
    CHECK(trn_json_load(&doc, path) == TRN_ERR_FORMAT, "a trailing comma in a file\n");
    CHECK(strstr(trn_error_reason(), "config.json") && strstr(trn_error_reason(), "byte 15"),
          "the reason names the file and byte 15: %s\n", trn_error_reason());
    CHECK(trn_json_load(&doc, dir) == TRN_ERR_IO, "a directory is not a file\n");
    remove(path);
    CHECK(trn_json_load(&doc, path) == TRN_ERR_IO, "a missing file\n");
    rmdir(dir);
    CHECK(trn_ledger_current(TRN_HOST, TRN_KIND_TEMP) == 0, "no temporary bytes left (%zu)\n", trn_ledger_current(TRN_HOST, TRN_KIND_TEMP));
}

int main(void) {
    test_malformed();
    test_config();
    test_load();
    return check_summary();
}
