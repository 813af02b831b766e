#!/usr/bin/env bash
# tests/test_export.sh - tools/export_hf: a model trained here, out to
# transformers' layout (config.json + model.safetensors), checked by a
# NumPy float64 forward of the exported files (tests/export_ref.py, the
# safetensors package) against the kit's own logits (--dump-logits):
#   GPT-2 (Conv1D matrices, tied wte), a Llama of the kit's preset (untied
#   head), a Hugging Face Llama with a tied head and llama3 RoPE scaling
#   trained 5 steps, and one whose vocabulary of 300 is padded to 384 here
#   (the export unpads it); each export loads back into the kit (--init DIR)
#   (--init DIR/model.safetensors: config.json is read beside it) with
#   bit-identical logits; a file that is not a model of the kit is
#   refused with one line. An export cut into Hugging Face's shards
#   (model.safetensors.index.json + 2 files) loads directly, bit-identical;
#   an index naming a missing shard is refused. tools/export_gguf: the two Llamas as GGUF in F32,
#   F16 and BF16, read back with the gguf package (tests/export_ref.py gguf):
#   every key and every tensor (bit for bit); dynamic RoPE refused (no GGUF
#   form). Skipped, with a line, without numpy + safetensors (the GGUF part
#   without the gguf package).
# The tokenizer.json the run used (skipped without the tokenizers and gguf
# packages): tests/export_ref.py tok-train trains a Llama-3-style byte-level
# BPE, a GPT-2-style one and a Llama-2-style byte-fallback "▁" BPE with the
# tokenizers package; a Llama of each vocabulary (tests/llama_ref.py write
# --vocab V) trains 3 steps on text with --tokenizer; both exports, without
# --tokenizer (found through the run's run.tokenizer), are checked by
# export_ref.py tok-check: tokenizer.json byte-identical and encoding a
# sample alike, tokenizer_config.json's special tokens, and the GGUF's
# tokenizer.ggml.* read back with the gguf package (model, pre, tokens in id
# order, merges or scores, token types, bos/eos/unk ids); a tokenizer of
# another size is refused, and a byte model without one says so.
# Where they are installed (each skipped with a line otherwise; CI has
# neither): llama.cpp, through the llama_cpp Python module (llama-cpp-
# python, or its llama_cpp/ on PYTHONPATH with LLAMA_CPP_LIB_PATH naming a
# libllama.so), runs the GGUF files: logits of validation batch 0 equal
# the kit's (F32 to 1e-4 x the largest logit; F16, BF16 looser), greedy 40
# tokens equal the kit's --top-k 1 sample, and its tokenizer gives the
# kit's ids (tools/make_shard) for the text; transformers with PyTorch
# loads the export_hf directories (AutoModelForCausalLM): logits to 1e-4 x,
# greedy generate equal to the kit's sample (tests/export_ref.py llamacpp*,
# hf). Here with both: 96 checks in 2 min 13 s (66 in 30 s without them).
set -u
cd "$(dirname "$0")/.."
G=${GPT2:-examples/gpt2}
L=${LLAMA:-examples/llama}
X=${EXPORT_HF:-tools/export_hf}
XG=${EXPORT_GGUF:-tools/export_gguf}
pass=0
fail=0
ok() { pass=$((pass + 1)); echo "ok   - $1"; }
bad() { fail=$((fail + 1)); echo "FAIL - $1"; }
check() { if eval "$2"; then ok "$1"; else bad "$1"; fi; }
for p in "$G" "$L" "$X" "$XG"; do
    if [ ! -x "$p" ]; then echo "FAIL - $p is not built (./build.sh)"; echo "0 passed, 1 failed"; exit 1; fi
done
if ! python3 -c 'import numpy, safetensors' 2>/dev/null; then
    echo "skip - python3 with numpy and safetensors is not available"
    echo "0 passed, 0 failed"
    exit 0
fi
D=$(mktemp -d /tmp/test_export.XXXXXX)
[ -n "${KEEP:-}" ] || trap 'rm -rf "$D"' EXIT
head -c 30000 README.md > "$D/text.txt"
R="--data $D/text.txt --batch 3 --seq 37 --sample 0 --threads 1"

# one NAME PROGRAM ARGS...: 5 steps, export, NumPy forward of the export, load it back
one() {
    local name=$1 prog=$2; shift 2
    "$prog" "$@" $R --steps 5 --out "$D/$name" --dump-logits "$D/$name.logits" > "$D/$name.out" 2>&1
    check "$name: 5 training steps (exit 0)" "[ $? = 0 ]"
    "$X" "$D/$name/model.safetensors" "$D/${name}_hf" > "$D/$name.x" 2>&1
    rc=$?
    check "$name: export_hf (exit 0): $(head -1 "$D/$name.x")" "[ $rc = 0 ]"
    local r
    r=$(python3 tests/export_ref.py check "$D/${name}_hf" "$D/text.txt" "$D/$name.logits" 3 37)
    check "$name: the export's NumPy forward equals the kit's logits: $r" "echo '$r' | grep -q '^ok'"
    "$prog" --init "$D/${name}_hf/model.safetensors" $R --steps 0 --out "$D/${name}_back" --dump-logits "$D/$name.back" > "$D/$name.b" 2>&1
    check "$name: the export loads back into the kit with bit-identical logits" "cmp -s '$D/$name.logits' '$D/$name.back'"
}
one gpt2 "$G" --model tiny
one llama "$L" --model tiny
python3 tests/llama_ref.py write "$D/hf_l3" --tied --rope llama3
one llama_tied_llama3 "$L" --init "$D/hf_l3"
check "llama_tied_llama3: exported tied (no lm_head.weight, tie_word_embeddings true) with its rope_scaling" \
    "grep -q '\"tie_word_embeddings\": true' '$D/llama_tied_llama3_hf/config.json' && grep -q llama3 '$D/llama_tied_llama3_hf/config.json' && ! grep -q lm_head '$D/llama_tied_llama3_hf/model.safetensors'"
python3 tests/llama_ref.py write "$D/hf_v300" --vocab 300
# a 300-token model reads token shards, not text: the bytes as a shard
"${MAKE_SHARD:-tools/make_shard}" -o "$D/text.bin" "$D/text.txt" > /dev/null
R="--data $D/text.bin --batch 3 --seq 37 --sample 0 --threads 1"
one llama_vocab300 "$L" --init "$D/hf_v300"
R="--data $D/text.txt --batch 3 --seq 37 --sample 0 --threads 1"
check "llama_vocab300: 384 rows here, 300 in the export" \
    "grep -q 'padded 384' '$D/llama_vocab300.out' && python3 -c \"from safetensors import safe_open; f = safe_open('$D/llama_vocab300_hf/model.safetensors', 'np'); import sys; sys.exit(f.get_slice('model.embed_tokens.weight').get_shape()[0] != 300)\""
"$X" "$D/text.txt" "$D/nothing" > /dev/null 2> "$D/bad.err"
rc=$?
check "a file that is not a model: exit 2, one line ($(head -1 "$D/bad.err"))" "[ $rc = 2 ] && [ \$(wc -l < '$D/bad.err') = 1 ]"

# --- Hugging Face's shards (model.safetensors.index.json) load directly -------------
# the untied llama's export cut into two files + the index, as transformers
# saves a large model (Python's standard library)
split() { # split SRC_DIR DST_DIR
    python3 - "$1" "$2" <<'PY'
import json, os, struct, sys
src, dst = sys.argv[1:3]
os.makedirs(dst, exist_ok=True)
b = open(os.path.join(src, "model.safetensors"), "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
h.pop("__metadata__", None)
names = sorted(h)
wmap = {}
for part, group in enumerate((names[:len(names) // 2], names[len(names) // 2:])):
    fname = "model-%05d-of-00002.safetensors" % (part + 1)
    hdr, off, blobs = {"__metadata__": {"format": "pt"}}, 0, []
    for k in group:
        v = h[k]
        blob = b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]]
        hdr[k] = {"dtype": v["dtype"], "shape": v["shape"], "data_offsets": [off, off + len(blob)]}
        off += len(blob)
        blobs.append(blob)
        wmap[k] = fname
    j = json.dumps(hdr).encode()
    j += b" " * (-len(j) % 8)
    open(os.path.join(dst, fname), "wb").write(struct.pack("<Q", len(j)) + j + b"".join(blobs))
json.dump({"metadata": {"total_size": len(b)}, "weight_map": wmap}, open(os.path.join(dst, "model.safetensors.index.json"), "w"))
PY
    cp "$1/config.json" "$2/"
}
split "$D/llama_hf" "$D/sharded"
"$L" --init "$D/sharded" $R --steps 0 --out "$D/sh_out" --dump-logits "$D/sharded.logits" > "$D/sh.out" 2>&1
check "sharded HF checkpoint (2 files + index.json): loads directly, bit-identical logits" "cmp -s '$D/llama.logits' '$D/sharded.logits'"
sed 's/model-00002-of-00002/model-00003-of-00002/' "$D/sharded/model.safetensors.index.json" > "$D/idx" && mv "$D/idx" "$D/sharded/model.safetensors.index.json"
"$L" --init "$D/sharded" $R --steps 0 --out "$D/sh_out" > /dev/null 2> "$D/bad.err"
rc=$?
check "sharded: an index naming a missing shard: exit 2, one line ($(head -1 "$D/bad.err"))" "[ $rc = 2 ] && [ \$(wc -l < '$D/bad.err') = 1 ] && grep -q 00003 '$D/bad.err'"

# --- GGUF ------------------------------------------------------------------------
if python3 -c 'import gguf' 2>/dev/null; then
    for m in llama llama_tied_llama3; do
        for t in f32 f16 bf16; do
            "$XG" --type $t "$D/$m/model.safetensors" "$D/$m.$t.gguf" > "$D/gg.out" 2>&1
            rc=$?
            check "$m: export_gguf --type $t (exit 0): $(head -1 "$D/gg.out")" "[ $rc = 0 ]"
            python3 tests/export_ref.py gguf "$D/$m/model.safetensors" "$D/$m.$t.gguf" $t > "$D/gg.ref" 2>&1
            rc=$?
            check "$m: the GGUF file ($t) read back by the gguf package: $(tr '\n' ' ' < "$D/gg.ref")" "[ $rc = 0 ]"
        done
    done
    python3 tests/llama_ref.py write "$D/hf_dyn" --rope dynamic
    "$L" --init "$D/hf_dyn" $R --steps 0 --out "$D/dyn" > /dev/null 2>&1
    "$XG" "$D/dyn/model.safetensors" "$D/dyn.gguf" > /dev/null 2> "$D/bad.err"
    rc=$?
    check "export_gguf: dynamic RoPE refused, one line ($(head -1 "$D/bad.err"))" "[ $rc = 2 ] && [ \$(wc -l < '$D/bad.err') = 1 ] && [ ! -e '$D/dyn.gguf' ]"
else
    echo "skip - GGUF read-back: the gguf package is not installed (pip install gguf)"
fi

# --- the exports run in llama.cpp and in transformers (each where it is installed) -------
# greedy NAME PROG CKPT PROMPT [FLAGS]: the kit's --top-k 1 sample of 40 tokens from CKPT into $D/NAME.greedy
# (--seq 64: the kit samples in a window of --seq tokens, and prompt + 40 must fit in it to be
# compared with programs that keep the whole context)
greedy() {
    "$2" --init "$3" --data "$D/text.txt" --batch 3 --seq 64 --threads 1 --steps 0 --sample 40 --top-k 1 \
        --prompt "$4" --out "$D/$1_g" ${5:-} > "$D/$1.greedy" 2>&1
}
LCPP=; python3 -c 'import gguf, llama_cpp' 2>/dev/null && LCPP=1
HFPT=; python3 -c 'import torch, transformers' 2>/dev/null && HFPT=1
if [ -n "$LCPP$HFPT" ]; then
    greedy llama "$L" "$D/llama/model.safetensors" "The kit"
    greedy llama_tied_llama3 "$L" "$D/llama_tied_llama3/model.safetensors" "The kit"
fi
if [ -n "$LCPP" ]; then
    for m in llama llama_tied_llama3; do
        for t in f32 f16 bf16; do
            python3 tests/export_ref.py llamacpp "$D/$m.$t.gguf" "$D/text.txt" "$D/$m.logits" 3 37 $t > "$D/lc.out" 2>&1
            rc=$?
            check "$m: $(tail -1 "$D/lc.out")" "[ $rc = 0 ]"
        done
        python3 tests/export_ref.py llamacpp-gen "$D/$m.f32.gguf" "The kit" 40 "$D/$m.greedy" > "$D/lc.out" 2>&1
        rc=$?
        check "$m: $(tail -1 "$D/lc.out")" "[ $rc = 0 ]"
    done
else
    echo "skip - llama.cpp: python3 cannot import llama_cpp (pip install llama-cpp-python; or its llama_cpp/ on PYTHONPATH with LLAMA_CPP_LIB_PATH=the directory of a libllama.so built from llama.cpp)"
fi
# transformers: the models are collected in HF_JOBS and checked by one python3 at the end
HF_JOBS=()
if [ -n "$HFPT" ]; then
    greedy gpt2 "$G" "$D/gpt2/model.safetensors" "The kit"
    for m in gpt2 llama llama_tied_llama3; do
        HF_JOBS+=("$D/${m}_hf" "$D/text.txt" "$D/$m.logits" 3 37 "The kit" 40 "$D/$m.greedy")
    done
fi

# --- the tokenizer.json the run used ---------------------------------------------------
# lines FILE RC: each "ok ..." / "FAIL ..." line of FILE as a check; a non-zero RC without a FAIL line fails too
lines() {
    local line nfail=0
    while IFS= read -r line; do
        case "$line" in
            "ok   "*) ok "${line#ok   }" ;;
            "FAIL "*) bad "${line#FAIL }"; nfail=$((nfail + 1)) ;;
            "skip "*) echo "$line" ;;
        esac
    done < "$1"
    if [ "$2" != 0 ] && [ $nfail = 0 ]; then bad "$1: exit $2: $(tail -1 "$1")"; fi
}
if python3 -c 'import tokenizers, gguf' 2>/dev/null; then
    python3 tests/export_ref.py tok-train "$D/tok" > "$D/tok.out" 2>&1
    rc=$?
    check "the tokenizers package trained 3 tokenizers (name, vocabulary): $(tr '\n' ' ' < "$D/tok.out")" "[ $rc = 0 ]"
    for fs in bytelevel:llama3 metaspace:llama2; do
        f=${fs%%:*} style=${fs##*:}
        V=$(sed -n "s/^$f //p" "$D/tok.out")
        python3 tests/llama_ref.py write "$D/hf_$f" --vocab "${V:-0}"
        "$L" --init "$D/hf_$f" --tokenizer "$D/tok/$f.json" --data "$D/text.txt" --batch 3 --seq 37 --sample 0 \
            --threads 1 --steps 3 --out "$D/run_$f" > "$D/run_$f.out" 2>&1
        check "$style: a $V-token Llama trains 3 steps on text with --tokenizer" "[ $? = 0 ] && grep -q 'tokenizer.json tokenizer' '$D/run_$f.out'"
        "$X" "$D/run_$f/model.safetensors" "$D/${f}_hf" > "$D/x_$f.out" 2>&1 # no --tokenizer: the run's
        rc=$?
        check "$style: export_hf finds the run's tokenizer: $(tail -1 "$D/x_$f.out")" "[ $rc = 0 ] && grep -q 'tokenizer.json (copied' '$D/x_$f.out'"
        "$XG" "$D/run_$f/model.safetensors" "$D/$f.gguf" > "$D/g_$f.out" 2>&1
        rc=$?
        check "$style: export_gguf: $(head -1 "$D/g_$f.out")" "[ $rc = 0 ]"
        python3 tests/export_ref.py tok-check $style "$D/tok/$f.json" "$D/${f}_hf" "$D/$f.gguf" > "$D/tc_$f.out" 2>&1
        lines "$D/tc_$f.out" $?
        # the kit's ids for the text, and its logits and greedy sample on them, for llama.cpp and transformers
        [ -n "$LCPP$HFPT" ] && "${MAKE_SHARD:-tools/make_shard}" --tokenizer "$D/tok/$f.json" --bos -o "$D/$f.bin" "$D/text.txt" > /dev/null 2>&1
        [ -n "$LCPP$HFPT" ] && "$L" --init "$D/run_$f/model.safetensors" --data "$D/$f.bin" --batch 3 --seq 37 \
            --threads 1 --steps 0 --sample 0 --out "$D/run_${f}_l" --dump-logits "$D/$f.logits" > /dev/null 2>&1
        [ -n "$LCPP$HFPT" ] && greedy $f "$L" "$D/run_$f/model.safetensors" "The kit" "--tokenizer $D/tok/$f.json"
        if [ -n "$LCPP" ]; then
            python3 tests/export_ref.py llamacpp-tok "$D/$f.gguf" "$D/$f.bin" "$D/text.txt" > "$D/lc.out" 2>&1
            lines "$D/lc.out" $?
            python3 tests/export_ref.py llamacpp "$D/$f.gguf" "$D/$f.bin" "$D/$f.logits" 3 37 f32 > "$D/lc.out" 2>&1
            rc=$?
            check "$style: $(tail -1 "$D/lc.out")" "[ $rc = 0 ]"
            python3 tests/export_ref.py llamacpp-gen "$D/$f.gguf" "The kit" 40 "$D/$f.greedy" > "$D/lc.out" 2>&1
            rc=$?
            check "$style: $(tail -1 "$D/lc.out")" "[ $rc = 0 ]"
        fi
        [ -n "$HFPT" ] && HF_JOBS+=("$D/${f}_hf" "$D/$f.bin" "$D/$f.logits" 3 37 "The kit" 40 "$D/$f.greedy")
    done
    # GPT-2's split: the same vocabulary size, so the byte-level model takes it
    "$XG" --tokenizer "$D/tok/gpt2.json" "$D/run_bytelevel/model.safetensors" "$D/gpt2tok.gguf" > "$D/g_gpt2.out" 2>&1
    rc=$?
    check "gpt2: export_gguf --tokenizer: $(head -1 "$D/g_gpt2.out")" "[ $rc = 0 ]"
    python3 tests/export_ref.py tok-check gpt2 "$D/tok/gpt2.json" - "$D/gpt2tok.gguf" > "$D/tc_gpt2.out" 2>&1
    lines "$D/tc_gpt2.out" $?
    if [ -n "$LCPP" ]; then
        "${MAKE_SHARD:-tools/make_shard}" --tokenizer "$D/tok/gpt2.json" -o "$D/gpt2tok.bin" "$D/text.txt" > /dev/null 2>&1
        python3 tests/export_ref.py llamacpp-tok "$D/gpt2tok.gguf" "$D/gpt2tok.bin" "$D/text.txt" > "$D/lc.out" 2>&1
        lines "$D/lc.out" $?
    fi
    "$XG" --tokenizer "$D/tok/metaspace.json" "$D/run_bytelevel/model.safetensors" "$D/wrong.gguf" > /dev/null 2> "$D/bad.err"
    rc=$?
    check "export_gguf: a tokenizer of another size refused, one line ($(head -1 "$D/bad.err"))" \
        "[ $rc = 2 ] && [ \$(wc -l < '$D/bad.err') = 1 ] && grep -q '2304 tokens' '$D/bad.err' && [ ! -e '$D/wrong.gguf' ]"
    "$X" --tokenizer "$D/tok/nothing.json" "$D/run_bytelevel/model.safetensors" "$D/nothing_hf" > /dev/null 2> "$D/bad.err"
    rc=$?
    check "export_hf --tokenizer of a missing file: exit 2, one line ($(head -1 "$D/bad.err"))" "[ $rc = 2 ] && [ \$(wc -l < '$D/bad.err') = 1 ]"
    check "a byte model (no tokenizer in its run): export_hf says so in one line, writes none ($(grep '^note' "$D/llama.x"))" \
        "[ \$(grep -c '^note: no --tokenizer' '$D/llama.x') = 1 ] && [ ! -e '$D/llama_hf/tokenizer.json' ]"
else
    echo "skip - tokenizer export: python3 cannot import tokenizers and gguf (pip install tokenizers gguf)"
fi


# --- transformers (PyTorch) on the export_hf directories: logits and greedy generate --------
if [ -n "$HFPT" ]; then
    python3 tests/export_ref.py hf "${HF_JOBS[@]}" > "$D/hf.out" 2>&1
    lines "$D/hf.out" $?
else
    echo "skip - transformers: python3 cannot import torch and transformers"
fi

echo "$pass passed, $fail failed"
[ $fail = 0 ]
