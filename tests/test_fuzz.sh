#!/usr/bin/env bash
# tests/test_fuzz.sh - a short fuzz run of the safetensors reader
# (tests/fuzz_safetensors.c), of the sharded manifest's reader
# (tests/fuzz_manifest.c, FUZZ_MANIFEST_SECONDS, default 10), of a Hugging
# Face config.json as examples/llama reads it (tests/fuzz_config.c,
# FUZZ_CONFIG_SECONDS, default 5) and of the GPT-2 tokenizer's vocab.json +
# merges.txt with encode/decode (tests/fuzz_tokenizer.c,
# FUZZ_TOKENIZER_SECONDS, default 5): libFuzzer with AddressSanitizer and UBSan,
# built here with clang, for FUZZ_SECONDS (default 20) on a seed corpus
# of files the kit writes plus hand-made foreign ones. Any crash, leak of
# a TEMP buffer, sanitizer report or timeout fails the test; the crashing
# input is kept as tests/bin/fuzz-crash-*.
# Without clang's libFuzzer it falls back to the plain ASan build's own
# mutation loop (weaker: no coverage guidance) and says so.
# A longer campaign: FUZZ_SECONDS=600 bash tests/test_fuzz.sh
set -u
cd "$(dirname "$0")/.."
pass=0; fail=0
ok()  { pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }
finish() { echo "$pass passed, $fail failed"; [ "$fail" = 0 ]; exit $?; }
secs=${FUZZ_SECONDS:-20}
tmp=$(mktemp -d /tmp/trn_fuzz.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
mkdir -p tests/bin

# the seed corpus comes from the plain build (build.sh makes it)
seeder=tests/bin/fuzz_safetensors
if [ ! -x "$seeder" ]; then bad "$seeder is missing (run ./build.sh)"; finish; fi
if "$seeder" --write-seeds "$tmp/corpus" > "$tmp/seed.log" 2>&1; then ok; else bad "seeds: $(cat "$tmp/seed.log")"; finish; fi

cat > "$tmp/dict" <<'EOF'
"\"dtype\""
"\"shape\""
"\"data_offsets\""
"\"__metadata__\""
"\"F32\""
"\"F16\""
"\"BF16\""
"\"I64\""
"\"U8\""
"\"trn.crc32c\""
"\"trn.version\""
"\"trn.kind\""
"\"optim.m\""
"\"a\""
"\"b\""
"\\u00e9"
"\\ud83d\\ude00"
"\\u0000"
"null"
"true"
"false"
"1e5"
"-0"
"18446744073709551616"
EOF

fuzzer=tests/bin/fuzz_safetensors_libfuzzer
CLANG=${CLANG:-$(command -v clang || command -v clang-14 || true)}
if [ -n "$CLANG" ] && "$CLANG" -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
        -DTRN_LIBFUZZER -I. -std=c99 -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE \
        -o "$fuzzer" tests/fuzz_safetensors.c -lm > "$tmp/build.log" 2>&1; then
    ok
    echo "libFuzzer for ${secs}s on $(ls "$tmp/corpus" | wc -l) seeds"
    ASAN_OPTIONS=detect_leaks=1 "$fuzzer" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
        -max_len=65536 -dict="$tmp/dict" -artifact_prefix=tests/bin/fuzz-crash- -print_final_stats=1 \
        "$tmp/corpus" > "$tmp/fuzz.log" 2>&1
    rc=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$tmp/fuzz.log")
    cov=$(grep -E '^#[0-9]+' "$tmp/fuzz.log" | tail -1 | sed -n 's/.*cov: \([0-9]*\).*/\1/p')
    if [ "$rc" = 0 ] && [ -n "$execs" ]; then
        ok
        echo "fuzz: ${execs} executions, coverage ${cov:-?} edges, no crash"
    else
        bad "libFuzzer found a problem (exit $rc):"
        grep -E 'ERROR|SUMMARY|invariant|Test unit written|runtime error' "$tmp/fuzz.log" | head -10
    fi
else
    echo "no clang with libFuzzer ($(tail -1 "$tmp/build.log" 2>/dev/null)): using the ASan build's mutation loop"
    asan=tests/bin/asan/fuzz_safetensors
    [ -x "$asan" ] || asan=$seeder
    if ASAN_OPTIONS=detect_leaks=1 timeout 600 "$asan" --mutate 300000 > "$tmp/fuzz.log" 2>&1; then
        ok; cat "$tmp/fuzz.log"
    else
        bad "mutation fuzzing crashed:"; tail -15 "$tmp/fuzz.log"
    fi
fi

# --- the sharded checkpoint's manifest (tests/fuzz_manifest.c): its own,
# shorter run (FUZZ_MANIFEST_SECONDS, default 10), the same rules
msecs=${FUZZ_MANIFEST_SECONDS:-10}
mseeder=tests/bin/fuzz_manifest
if [ ! -x "$mseeder" ]; then bad "$mseeder is missing (run ./build.sh)"; finish; fi
if "$mseeder" --write-seeds "$tmp/mcorpus" > "$tmp/mseed.log" 2>&1; then ok; else bad "manifest seeds: $(cat "$tmp/mseed.log")"; finish; fi
cat > "$tmp/mdict" <<'EOF'
"\"format\": "
"\"train.h sharded checkpoint 2\""
"\"train.h sharded checkpoint 1\""
"\"save_id\": \""
"\"world_size\": "
"\"n_floats\": "
"{\"name\": \""
"\"offset\": "
"\"shape\": ["
"h.0.w"
"head"
"18446744073709551616"
"2147483648"
"-1"
EOF
mfuzzer=tests/bin/fuzz_manifest_libfuzzer
if [ -n "$CLANG" ] && "$CLANG" -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
        -DTRN_LIBFUZZER -I. -std=c99 -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE \
        -o "$mfuzzer" tests/fuzz_manifest.c -lm -pthread > "$tmp/mbuild.log" 2>&1; then
    ok
    ASAN_OPTIONS=detect_leaks=1 "$mfuzzer" -max_total_time="$msecs" -timeout=10 -rss_limit_mb=2048 -max_len=4096 \
        -dict="$tmp/mdict" -artifact_prefix=tests/bin/fuzz-manifest-crash- -print_final_stats=1 \
        "$tmp/mcorpus" > "$tmp/mfuzz.log" 2>&1
    rc=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$tmp/mfuzz.log")
    if [ "$rc" = 0 ] && [ -n "$execs" ]; then
        ok
        echo "fuzz (manifest): ${execs} executions, no crash"
    else
        bad "libFuzzer found a problem in the manifest reader (exit $rc):"
        grep -E 'ERROR|SUMMARY|invariant|Test unit written|runtime error' "$tmp/mfuzz.log" | head -10
    fi
else
    echo "no clang with libFuzzer: the manifest's mutation loop"
    masan=tests/bin/asan/fuzz_manifest
    [ -x "$masan" ] || masan=$mseeder
    if ASAN_OPTIONS=detect_leaks=1 timeout 600 "$masan" --mutate 300000 > "$tmp/mfuzz.log" 2>&1; then
        ok; cat "$tmp/mfuzz.log"
    else
        bad "manifest mutation fuzzing crashed:"; tail -15 "$tmp/mfuzz.log"
    fi
fi

# --- config.json (tests/fuzz_config.c) and the tokenizer files
# (tests/fuzz_tokenizer.c): the same rules, one function.
# fuzz_target NAME SECONDS MAX_LEN MUTATE_RUNS; the dictionary is
# $tmp/NAME.dict
fuzz_target() {
    local name=$1 s=$2 max_len=$3 runs=$4 seeder=tests/bin/fuzz_$1 lf=tests/bin/fuzz_$1_libfuzzer rc execs asan
    if [ ! -x "$seeder" ]; then bad "$seeder is missing (run ./build.sh)"; return; fi
    if "$seeder" --write-seeds "$tmp/$name.corpus" > "$tmp/$name.seed.log" 2>&1; then ok
    else bad "$name seeds: $(cat "$tmp/$name.seed.log")"; return; fi
    if [ -n "$CLANG" ] && "$CLANG" -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
            -DTRN_LIBFUZZER -I. -std=c99 -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE \
            -o "$lf" "tests/fuzz_$name.c" -lm > "$tmp/$name.build.log" 2>&1; then
        ok
        ASAN_OPTIONS=detect_leaks=1 "$lf" -max_total_time="$s" -timeout=10 -rss_limit_mb=2048 -max_len="$max_len" \
            -dict="$tmp/$name.dict" -artifact_prefix="tests/bin/fuzz-$name-crash-" -print_final_stats=1 \
            "$tmp/$name.corpus" > "$tmp/$name.fuzz.log" 2>&1
        rc=$?
        execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$tmp/$name.fuzz.log")
        if [ "$rc" = 0 ] && [ -n "$execs" ]; then
            ok
            echo "fuzz ($name): ${execs} executions, no crash"
        else
            bad "libFuzzer found a problem in fuzz_$name (exit $rc):"
            grep -E 'ERROR|SUMMARY|invariant|Test unit written|runtime error' "$tmp/$name.fuzz.log" | head -10
        fi
    else
        echo "no clang with libFuzzer: fuzz_$name's mutation loop"
        asan=tests/bin/asan/fuzz_$name
        [ -x "$asan" ] || asan=$seeder
        if ASAN_OPTIONS=detect_leaks=1 timeout 600 "$asan" --mutate "$runs" > "$tmp/$name.fuzz.log" 2>&1; then
            ok; cat "$tmp/$name.fuzz.log"
        else
            bad "fuzz_$name's mutation fuzzing crashed:"; tail -15 "$tmp/$name.fuzz.log"
        fi
    fi
}

if [ -f examples/llama.c ]; then # (the target includes the example)
    cat > "$tmp/config.dict" <<'EOF'
"\"num_hidden_layers\""
"\"num_attention_heads\""
"\"num_key_value_heads\""
"\"hidden_size\""
"\"intermediate_size\""
"\"vocab_size\""
"\"head_dim\""
"\"max_position_embeddings\""
"\"rope_theta\""
"\"rms_norm_eps\""
"\"tie_word_embeddings\""
"\"hidden_act\""
"\"silu\""
"\"attention_bias\""
"\"mlp_bias\""
"\"rope_scaling\""
"\"rope_parameters\""
"\"rope_type\""
"\"type\""
"\"factor\""
"\"low_freq_factor\""
"\"high_freq_factor\""
"\"original_max_position_embeddings\""
"\"llama3\""
"\"dynamic\""
"\"linear\""
"\"default\""
"null"
"true"
"false"
"1e5"
"-0"
"1e-400"
"1e400"
"2147483648"
"1073741824"
"18446744073709551616"
"\\u00e9"
"\\ud83d\\ude00"
"\\u0000"
EOF
    fuzz_target config "${FUZZ_CONFIG_SECONDS:-5}" 4096 100000
fi

cat > "$tmp/tokenizer.dict" <<'EOF'
"\"<|endoftext|>\""
"\xc4\xa0"
"\xc4\x8a"
"#version: 0.2\x0a"
"\\u0120"
"\\ud83d\\ude00"
"\\u0000"
"\\\""
"\": "
"\x0d\x0a"
"16777215"
"\x00"
EOF
fuzz_target tokenizer "${FUZZ_TOKENIZER_SECONDS:-5}" 8192 3000
finish
