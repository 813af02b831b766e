#!/usr/bin/env bash
# tests/test_gpt2.sh - examples/gpt2 end to end:
#   1. 30 steps of the default preset on the kit's own text lower the loss
#      (read from the --log JSONL), and write the plot, weights, checkpoints
#   2. a tiny model memorizes one batch (--overfit): loss near zero
#   3. weights saved and loaded back (--init) give bit-identical logits, also
#      through a Hugging Face layout file (Conv1D, "transformer." prefix,
#      mask buffers, unpadded vocab) and llm.c .bin files (versions 3 and 1),
#      written from our file by Python (skipped without numpy/safetensors)
#   4. resume: N steps uninterrupted == resume from the mid-run checkpoint to
#      N (weights and logged losses bit for bit), also via a run directory
#      whose newest checkpoint is broken
#   5. every bad input exits with code 2 and one line on stderr
# Prints "N passed, M failed"; exits non-zero on failure.
set -u
cd "$(dirname "$0")/.."
G=${GPT2:-examples/gpt2} # GPT2=path: test another build (e.g. with AddressSanitizer)
pass=0
fail=0
ok() { pass=$((pass + 1)); echo "ok   - $1"; }
bad() { fail=$((fail + 1)); echo "FAIL - $1"; }
check() { if eval "$2"; then ok "$1"; else bad "$1"; fi; }
if [ ! -x "$G" ]; then echo "FAIL - $G is not built (./build.sh)"; echo "0 passed, 1 failed"; exit 1; fi
D=$(mktemp -d /tmp/test_gpt2.XXXXXX)
[ -n "${KEEP:-}" ] || trap 'rm -rf "$D"' EXIT # KEEP=1: keep the files for a look
head -c 60000 train.h > "$D/text.txt" # a fixed snapshot: the kit's files may change while we run
HAVE_PY=0
python3 -c 'import numpy, safetensors' 2>/dev/null && HAVE_PY=1

# last value of "key": in a JSONL file, for lines that have it
jget() { grep "\"$2\":" "$1" | sed -n "s/.*\"$2\":\([-0-9.eE+]*\).*/\1/p"; }

# --- 1. the default preset learns --------------------------------------------
$G --steps 30 --threads 2 --eval-every 10 --eval-batches 4 --sample 60 --out "$D/mini" --log "$D/mini.jsonl" \
    > "$D/mini.out" 2> "$D/mini.err"
check "default preset: 30 steps run (exit 0)" "[ $? = 0 ]"
losses=$(jget "$D/mini.jsonl" loss)
n=$(echo "$losses" | grep -c .)
first=$(echo "$losses" | head -1)
last5=$(echo "$losses" | tail -5 | awk '{s += $1} END {if (NR) print s / NR}')
check "default preset: 30 training lines in the log (got $n)" "[ $n = 30 ]"
check "default preset: first loss $first is about ln(256) = 5.55" "awk 'BEGIN {exit !($first > 5.0 && $first < 6.0)}'"
check "default preset: loss falls by > 1 nat ($first -> mean of last 5 = $last5)" "awk 'BEGIN {exit !($last5 < $first - 1.0)}'"
nv=$(jget "$D/mini.jsonl" val_loss | grep -c .)
check "default preset: validation at steps 0,10,20,30 (got $nv)" "[ $nv = 4 ]"
check "default preset: every log line has the issue's fields" \
    "[ \$(grep -c '\"step\":.*\"loss\":.*\"lr\":.*\"grad_norm\":.*\"ms\":.*\"tok_per_s\":.*\"mem_bytes\":' '$D/mini.jsonl') = 30 ]"
check "default preset: per-step lines printed" "[ \$(grep -c '^step .*loss .*lr .*norm .*ms .*tok/s .*mem' '$D/mini.out') = 30 ]"
check "default preset: loss.svg with both curves" "grep -q polyline '$D/mini/loss.svg' && grep -q circle '$D/mini/loss.svg'"
check "default preset: model.safetensors and a checkpoint written" "[ -s '$D/mini/model.safetensors' ] && ls '$D/mini'/ckpt_*.safetensors >/dev/null"
check "default preset: a sample was printed" "grep -q -- '---- sample' '$D/mini.out'"

# --- 2. a tiny model memorizes one batch ----------------------------------------
T="--model tiny --data $D/text.txt --batch 4 --seq 32 --sample 0"
$G $T --overfit --steps 150 --lr 1e-2 --warmup 0 --weight-decay 0 --eval-every 0 --threads 1 --out "$D/of" > "$D/of.out" 2>&1
v=$(sed -n 's/^final val_loss //p' "$D/of.out")
check "overfit: one batch memorized, loss $v < 0.05" "[ -n '$v' ] && awk 'BEGIN {exit !($v < 0.05)}'"

# --- 3. save -> load gives identical logits -----------------------------------
$G $T --steps 10 --threads 1 --out "$D/s1" --dump-logits "$D/s1.logits" > "$D/s1.out" 2>&1
$G $T --steps 0 --threads 1 --init "$D/s1/model.safetensors" --out "$D/s2" --dump-logits "$D/s2.logits" > "$D/s2.out" 2>&1
check "save/load: model.safetensors -> identical logits" "[ -s '$D/s1.logits' ] && cmp -s '$D/s1.logits' '$D/s2.logits'"
check "save/load: identical validation loss" \
    "grep -q '^final val_loss' '$D/s1.out' && [ \"\$(grep '^final val_loss' '$D/s1.out')\" = \"\$(grep '^final val_loss' '$D/s2.out')\" ]"
ck=$(ls "$D/s1"/ckpt_*.safetensors | tail -1)
$G $T --steps 0 --threads 1 --init "$ck" --out "$D/s3" --dump-logits "$D/s3.logits" > /dev/null 2>&1
check "save/load: a training checkpoint as --init -> identical logits" "cmp -s '$D/s1.logits' '$D/s3.logits'"
if [ $HAVE_PY = 1 ]; then
    python3 tests/gpt2_convert.py vocab "$D/bpe" "$D/text.txt"
    B="--model tiny --bpe $D/bpe --data $D/text.txt --batch 4 --seq 32 --sample 0 --threads 1"
    $G $B --steps 10 --out "$D/b1" --dump-logits "$D/b1.logits" > "$D/b1.out" 2>&1
    check "bpe: a 300-token vocabulary (padded to 384) trains" "grep -q 'vocab=300 (padded 384)' '$D/b1.out' && [ -s '$D/b1.logits' ]"
    mkdir -p "$D/hf1" "$D/hf2"
    python3 tests/gpt2_convert.py hf "$D/b1/model.safetensors" "$D/hf1/model.safetensors" ""
    python3 tests/gpt2_convert.py hf "$D/b1/model.safetensors" "$D/hf2/model.safetensors" transformer.
    python3 tests/gpt2_convert.py llmc "$D/b1/model.safetensors" "$D/m3.bin" 3
    python3 tests/gpt2_convert.py llmc "$D/b1/model.safetensors" "$D/m1.bin" 1
    for f in hf1/model.safetensors hf2/model.safetensors m3.bin m1.bin; do
        rm -f "$D/i.logits"
        $G $B --steps 0 --init "$D/$f" --out "$D/i" --dump-logits "$D/i.logits" > "$D/i.out" 2>&1
        check "--init $f -> identical logits" "cmp -s '$D/b1.logits' '$D/i.logits'"
    done
    python3 tests/gpt2_convert.py llmc "$D/s1/model.safetensors" "$D/tiny.bin" 3
    head -c 5000 "$D/tiny.bin" > "$D/cut.bin"
else
    echo "skip - Hugging Face / llm.c / BPE checks (python3 with numpy and safetensors not found)"
    printf '\xc6\xd7\x34\x01\x03\x00\x00\x00\x40\x00\x00\x00\x00\x01\x00\x00\x02\x00\x00\x00\x02\x00\x00\x00\x20\x00\x00\x00\x00\x01\x00\x00' > "$D/cut.bin"
    head -c 3000 /dev/zero >> "$D/cut.bin"
fi

# --- 4. resume reproduces the uninterrupted run -------------------------------
R="--model tiny --data $D/text.txt --batch 4 --seq 32 --grad-accum 2 --steps 20 --ckpt-every 10 --eval-every 5 --sample 0 --threads 2"
$G $R --out "$D/r1" --log "$D/r1.jsonl" > "$D/r1.out" 2>&1
mkdir -p "$D/r2"
cp "$D/r1/ckpt_00000010.safetensors" "$D/r2/"
head -n "$(grep -n '"step":10,"val_loss"' "$D/r1.jsonl" | cut -d: -f1)" "$D/r1.jsonl" > "$D/r2.jsonl"
echo '{"step":11,"loss":9,"lr":0,"grad_norm":0,"ms":0,"tok_per_s":0,"mem_bytes":0}' >> "$D/r2.jsonl" # a killed run's extra line
$G --resume "$D/r2/ckpt_00000010.safetensors" --threads 2 --out "$D/r2" --log "$D/r2.jsonl" > "$D/r2.out" 2>&1
check "resume: started at step 10" "grep -q 'resumed from .* at step 10' '$D/r2.out'"
check "resume: final weights bit-identical to the uninterrupted run" "cmp -s '$D/r1/model.safetensors' '$D/r2/model.safetensors'"
strip() { sed 's/,"ms".*//' "$1"; }
check "resume: every logged loss and val_loss identical" "diff <(strip '$D/r1.jsonl') <(strip '$D/r2.jsonl') > /dev/null"
mkdir -p "$D/r3"
cp "$D/r1/ckpt_00000010.safetensors" "$D/r3/"
head -c 3000 "$D/r1/ckpt_00000020.safetensors" > "$D/r3/ckpt_00000015.safetensors" # newest, but broken
$G --resume "$D/r3" --threads 2 --out "$D/r3" > "$D/r3.out" 2>&1
check "resume DIR: skips the broken newest checkpoint, same final weights" \
    "grep -q 'at step 10' '$D/r3.out' && cmp -s '$D/r1/model.safetensors' '$D/r3/model.safetensors'"

# --- 5. bad input: exit code 2, one line on stderr ------------------------------
: > "$D/empty.txt"
head -c 100 "$D/text.txt" > "$D/short.txt"
mkdir -p "$D/emptydir"
{ printf '\x88\xd8\x34\x01\x01\x00\x00\x00\xd0\x07\x00\x00'; head -c 1012 /dev/zero; head -c 4000 /dev/zero | tr '\0' '\022'; } > "$D/gpt2tokens.bin"
expect2() { # expect2 DESCRIPTION ARGS...: exit code 2, one stderr line
    local what=$1; shift
    "$G" --threads 1 --sample 0 --out "$D/bad" "$@" > "$D/bad.out" 2> "$D/bad.err"
    local rc=$? lines
    lines=$(wc -l < "$D/bad.err")
    if [ $rc = 2 ] && [ "$lines" = 1 ]; then ok "bad input: $what -> $(cat "$D/bad.err")"
    else bad "bad input: $what: exit $rc, $lines stderr lines: $(head -3 "$D/bad.err")"; fi
}
expect2 "missing --data" --data "$D/nope.txt"
expect2 "empty --data" --data "$D/empty.txt"
expect2 "--data too short" --model tiny --data "$D/short.txt" --batch 4 --seq 32
expect2 "--data is a directory" --data "$D/emptydir"
expect2 "unknown preset" --model gpt5
expect2 "token ids >= vocab" --model tiny --data "$D/gpt2tokens.bin"
expect2 "--seq above the context" --model tiny --seq 100 --data "$D/text.txt"
expect2 "missing --init" --init "$D/nope.safetensors" --data "$D/text.txt"
expect2 "--init is not a model" --init "$D/text.txt" --data "$D/text.txt"
expect2 "--init truncated llm.c file" --init "$D/cut.bin" --data "$D/text.txt"
expect2 "missing --bpe" --bpe "$D/nope" --data "$D/text.txt"
expect2 "--resume missing" --resume "$D/nope"
expect2 "--resume dir without checkpoints" --resume "$D/emptydir"
expect2 "--steps not a number" --steps abc
expect2 "--lr negative" --lr -1
expect2 "--batch 0" --batch 0
expect2 "flag without value" --steps
expect2 "unknown flag" --fast
expect2 "GPT-2 vocabulary with text and no --bpe" --model gpt2 --data "$D/text.txt"
$G --help > "$D/help.out" 2>&1
check "--help exits 0 and lists the flags" "[ $? = 0 ] && grep -q -- '--grad-accum' '$D/help.out'"

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
