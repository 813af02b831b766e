#!/usr/bin/env bash
# tests/test_llama.sh - examples/llama end to end:
#   1. 30 steps of the default preset on the kit's own text lower the loss
#      (read from the --log JSONL), write the plot, weights, checkpoints, a sample
#   2. a tiny model memorizes one batch (--overfit): loss near zero
#   3. Hugging Face layout: tests/llama_ref.py writes a tiny random Llama
#      (config.json + model.safetensors, q/k/v separate, grouped-query heads,
#      rope_theta and rms_norm_eps from the config; also with a tied head,
#      with BF16 weights, and with RoPE scaled as linear, dynamic and llama3
#      in transformers 4.x's and 5.x's config forms); the kit's logits after
#      --init equal a NumPy reference of the same forward; a wrong pairing
#      or an ignored scaling is caught (the check can fail); 20 steps of
#      tied and untied training equal a float64 NumPy reference (AdamW,
#      clipping, cosine lr); yarn is refused by name; Llama 3's vocabulary
#      (128,256 tokens) trains from a uint32 token shard as the reference
#      does, and samples ids above 65535. Skipped, with a line,
#      without numpy + safetensors.
#   4. weights saved and loaded back (--init model.safetensors): identical logits
#   5. resume: N steps uninterrupted == resume from the mid-run checkpoint
#      (weights and logged losses bit for bit)
#   6. bad input exits 2 with one line on stderr
set -u
cd "$(dirname "$0")/.."
L=${LLAMA:-examples/llama}
pass=0
fail=0
ok() { pass=$((pass + 1)); echo "ok   - $1"; }
bad() { fail=$((fail + 1)); echo "FAIL - $1"; }
check() { if eval "$2"; then ok "$1"; else bad "$1"; fi; }
if [ ! -x "$L" ]; then echo "FAIL - $L is not built (./build.sh)"; echo "0 passed, 1 failed"; exit 1; fi
D=$(mktemp -d /tmp/test_llama.XXXXXX)
[ -n "${KEEP:-}" ] || trap 'rm -rf "$D"' EXIT
head -c 60000 train.h > "$D/text.txt" # a fixed snapshot
jget() { grep "\"$2\":" "$1" | sed -n "s/.*\"$2\":\([-0-9.eE+]*\).*/\1/p"; }

# --- 1. the default preset learns --------------------------------------------
$L --steps 30 --threads 2 --eval-every 10 --eval-batches 4 --sample 60 --out "$D/mini" --log "$D/mini.jsonl" \
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
check "default preset: loss.svg with both curves" "grep -q polyline '$D/mini/loss.svg' && grep -q circle '$D/mini/loss.svg'"
check "default preset: model.safetensors and a checkpoint written" "[ -s '$D/mini/model.safetensors' ] && ls '$D/mini'/ckpt_*.safetensors >/dev/null"
check "default preset: grouped-query heads (kv_heads=2 of 4)" "grep -q 'heads=4 kv_heads=2' '$D/mini.out'"
check "default preset: a sample was printed" "grep -q -- '---- sample' '$D/mini.out'"

# --- 2. a tiny model memorizes one batch ----------------------------------------
T="--model tiny --data $D/text.txt --batch 4 --seq 32 --sample 0"
# runs of spaces squeezed: two windows of 32 blanks with different next
# bytes would put a floor under the loss that depends on train.h's layout
tr -s ' ' < "$D/text.txt" > "$D/squeezed.txt"
$L $T --data "$D/squeezed.txt" --overfit --steps 150 --lr 1e-2 --warmup 0 --weight-decay 0 --eval-every 0 --threads 1 --out "$D/of" > "$D/of.out" 2>&1
v=$(sed -n 's/^final val_loss //p' "$D/of.out")
check "overfit: one batch memorized, loss $v < 0.05" "[ -n '$v' ] && awk 'BEGIN {exit !($v < 0.05)}'"

# --- 3. Hugging Face layout against a NumPy reference ------------------------------
if ! python3 -c 'import numpy, safetensors' 2>/dev/null; then
    python3 -m pip install -q safetensors >/dev/null 2>&1 # numpy + safetensors: try once
fi
if python3 -c 'import numpy, safetensors' 2>/dev/null; then
    for v in plain tied bf16; do
        case $v in plain) f="" ;; tied) f="--tied" ;; bf16) f="--bf16" ;; esac
        python3 tests/llama_ref.py write "$D/hf_$v" $f
        $L --init "$D/hf_$v" --steps 0 --data "$D/text.txt" --batch 3 --seq 37 --sample 0 --threads 1 \
            --out "$D/o_$v" --dump-logits "$D/hf_$v.logits" > "$D/hf_$v.out" 2>&1
        check "HF Llama ($v): --init loads it (exit 0)" "[ $? = 0 ]"
        r=$(python3 tests/llama_ref.py check "$D/hf_$v" "$D/text.txt" "$D/hf_$v.logits" 3 37)
        check "HF Llama ($v): logits equal the NumPy reference: $r" "echo '$r' | grep -q '^ok'"
    done
    # tied training: the head is the embedding tensor itself (one gradient,
    # one AdamW state), as transformers trains tie_word_embeddings: 20 steps
    # on one batch of 3 x 32 bytes against the float64 NumPy reference
    head -c 97 train.h > "$D/one.txt"
    TR="--data $D/one.txt --batch 3 --seq 32 --overfit --steps 20 --lr 1e-2 --min-lr 1e-3 --warmup 0 --weight-decay 0 --clip 1 --eval-every 0 --sample 0 --threads 1"
    for v in tied plain; do
        $L --init "$D/hf_$v" $TR --out "$D/tr_$v" --log "$D/tr_$v.jsonl" --dump-logits "$D/tr_$v.logits" > "$D/tr_$v.out" 2>&1
        python3 tests/llama_ref.py train "$D/hf_$v" "$D/one.txt" 32 "$D/tr_$v.jsonl" "$D/tr_$v/model.safetensors" 20 1e-2 1e-3 1 > "$D/tr_$v.ref"
        rc=$?
        check "HF Llama ($v): 20 training steps equal the NumPy reference: $(tr '\n' ';' < "$D/tr_$v.ref")" "[ $rc = 0 ]"
    done
    python3 tests/llama_ref.py train "$D/hf_tied" "$D/one.txt" 32 "$D/tr_tied.jsonl" "$D/tr_tied/model.safetensors" 20 1e-2 1e-3 1 --untie > "$D/tr_untie.ref"
    check "tied: the reference check rejects a head trained apart from the embedding" "[ $? = 1 ]"
    $L --init "$D/tr_tied/model.safetensors" $TR --steps 0 --out "$D/tr_tied2" --dump-logits "$D/tr_tied2.logits" > "$D/tr_tied2.out" 2>&1
    check "tied: the saved model loads back tied (identical logits)" "cmp -s '$D/tr_tied.logits' '$D/tr_tied2.logits'"
    python3 tests/llama_ref.py check "$D/hf_plain" "$D/text.txt" "$D/hf_tied.logits" 3 37 > "$D/neg.out"
    check "the reference check rejects another model's logits" "[ $? = 1 ]"
    # Llama 3's vocabulary: 128,256 tokens, fed from a uint32 token shard
    # (llm.c's format, written by NumPy): 3 steps equal the float64
    # reference (losses and weights), and the sample draws ids above 65535
    # (printed as <id>: the byte tokenizer has no text for them)
    python3 tests/llama_ref.py write "$D/hf_big" --vocab 128256
    python3 tests/llama_ref.py shard "$D/big.bin" 97 128256 5
    $L --init "$D/hf_big" --data "$D/big.bin" --batch 3 --seq 32 --overfit --steps 3 --lr 1e-2 --min-lr 1e-3 --warmup 0 \
        --weight-decay 0 --clip 1 --eval-every 0 --sample 12 --threads 2 --out "$D/tr_big" --log "$D/tr_big.jsonl" \
        > "$D/tr_big.out" 2>&1
    rc=$? # (the output holds a NUL: the prompt is token 0, so grep -a)
    check "vocab 128,256: 3 steps on a uint32 shard (exit 0; $(grep -a -o 'vocab=[0-9]* (padded [0-9]*)' "$D/tr_big.out"))" "[ $rc = 0 ]"
    python3 tests/llama_ref.py train "$D/hf_big" "$D/big.bin" 32 "$D/tr_big.jsonl" "$D/tr_big/model.safetensors" 3 1e-2 1e-3 1 > "$D/tr_big.ref"
    rc=$?
    check "vocab 128,256: 3 training steps equal the NumPy reference: $(tr '\n' ';' < "$D/tr_big.ref")" "[ $rc = 0 ]"
    hi=$(sed -n '/^---- sample/,/^----$/p' "$D/tr_big.out" | grep -a -o '<[0-9]*>' | tr -d '<>' | sort -n | tail -1)
    check "vocab 128,256: the sample draws ids above 65535 (largest ${hi:-none})" "[ -n '$hi' ] && [ '$hi' -gt 65535 ] && [ '$hi' -lt 128256 ]"
    # top-k over all 128,256 (the sampler sorts instead of 128,256 passes)
    $L --init "$D/tr_big/model.safetensors" --data "$D/big.bin" --batch 3 --seq 32 --overfit --steps 0 --sample 6 --top-k 1000000 \
        --threads 2 --out "$D/tr_big2" > "$D/tr_big2.out" 2>&1
    rc=$?
    n=$(sed -n '/^---- sample/,/^----$/p' "$D/tr_big2.out" | grep -a -o '<[0-9]*>' | grep -c .)
    check "vocab 128,256: --top-k beyond V samples from all of it (exit $rc, $n ids)" "[ $rc = 0 ] && grep -aq 'top-k 1000000' '$D/tr_big2.out' && [ $n -ge 5 ]"
    # RoPE scaling as transformers 4.x (rope_scaling) and 5.x (rope_parameters)
    # write it: the logits equal the reference of transformers' formulas, and
    # not the unscaled ones (so a kit that ignored the scaling fails)
    for r in linear dynamic llama3; do
        for f in "" --v5; do
            v=$r${f#--}
            python3 tests/llama_ref.py write "$D/hf_$v" --rope $r $f
            $L --init "$D/hf_$v" --steps 0 --data "$D/text.txt" --batch 3 --seq 37 --sample 0 --threads 1 \
                --out "$D/o_$v" --dump-logits "$D/hf_$v.logits" > "$D/hf_$v.out" 2>&1
            r1=$(python3 tests/llama_ref.py check "$D/hf_$v" "$D/text.txt" "$D/hf_$v.logits" 3 37)
            python3 tests/llama_ref.py check "$D/hf_$v" "$D/text.txt" "$D/hf_$v.logits" 3 37 --unscaled > "$D/neg_$v.out"
            r2=$?
            check "RoPE $r (${f:-4.x}): logits equal the NumPy reference, not the unscaled one: $r1" "echo '$r1' | grep -q '^ok' && [ $r2 = 1 ]"
        done
    done
    # a scaled model saved here loads back scaled (the scaling is in its metadata)
    $L --init "$D/hf_llama3" --steps 0 --data "$D/text.txt" --batch 3 --seq 37 --sample 0 --threads 1 --out "$D/o_l3" > /dev/null 2>&1
    $L --init "$D/o_l3/model.safetensors" --steps 0 --data "$D/text.txt" --batch 3 --seq 37 --sample 0 --threads 1 \
        --out "$D/o_l3b" --dump-logits "$D/l3b.logits" > /dev/null 2>&1
    check "RoPE llama3: the model saved here loads back with its scaling (identical logits)" "cmp -s '$D/hf_llama3.logits' '$D/l3b.logits'"
    # a RoPE type not computed here is refused by name, not run as plain RoPE
    python3 tests/llama_ref.py write "$D/hf_yarn" --rope yarn
    $L --init "$D/hf_yarn" --steps 0 --data "$D/text.txt" --sample 0 --out "$D/o_s" > /dev/null 2> "$D/scaled.err"
    rc=$?
    check "HF config with rope_type yarn: exit 2 ($(head -1 "$D/scaled.err"))" "[ $rc = 2 ] && grep -q yarn '$D/scaled.err' && [ \$(wc -l < '$D/scaled.err') = 1 ]"
else
    echo "skip - HF layout vs NumPy reference: python3 with numpy and safetensors is not available"
fi

# --- 4. save -> load gives identical logits -----------------------------------
$L $T --steps 10 --threads 1 --out "$D/s1" --dump-logits "$D/s1.logits" > "$D/s1.out" 2>&1
$L $T --steps 0 --threads 1 --init "$D/s1/model.safetensors" --out "$D/s2" --dump-logits "$D/s2.logits" > "$D/s2.out" 2>&1
check "save/load: logits after --init of our own model.safetensors are bit-identical" "cmp -s '$D/s1.logits' '$D/s2.logits'"

# --- 5. resume is bit-exact ------------------------------------------------------
# the run's checkpoint at step 10 + the log up to there (and a killed run's
# extra line, which resume drops) -> steps 11..20 again
R="$T --grad-accum 2 --steps 20 --eval-every 5 --ckpt-every 10 --threads 2"
$L $R --out "$D/r1" --log "$D/r1.jsonl" > "$D/r1.out" 2>&1
mkdir -p "$D/r2"
cp "$D/r1/ckpt_00000010.safetensors" "$D/r2/"
head -n "$(grep -n '"step":10,"val_loss"' "$D/r1.jsonl" | cut -d: -f1)" "$D/r1.jsonl" > "$D/r2.jsonl"
echo '{"step":11,"loss":9,"lr":0,"grad_norm":0,"ms":0,"tok_per_s":0,"mem_bytes":0}' >> "$D/r2.jsonl"
$L --resume "$D/r2" --threads 2 --out "$D/r2" --log "$D/r2.jsonl" > "$D/r2.out" 2>&1
check "resume: continued from step 10 (run directory)" "grep -q 'resumed from .*ckpt_00000010.* at step 10' '$D/r2.out'"
check "resume: final weights bit-identical to the uninterrupted run" "cmp -s '$D/r1/model.safetensors' '$D/r2/model.safetensors'"
strip() { sed 's/,"ms".*//' "$1"; }
check "resume: every logged loss and val_loss identical" "diff <(strip '$D/r1.jsonl') <(strip '$D/r2.jsonl') > /dev/null"

# --- 6. bad input: exit 2, one line ------------------------------------------------
badrun() { # badrun NAME ARGS...
    local name=$1; shift
    "$L" "$@" > /dev/null 2> "$D/bad.err"
    local rc=$?
    check "bad input: $name -> $(head -1 "$D/bad.err")" "[ $rc = 2 ] && [ \$(wc -l < '$D/bad.err') = 1 ]"
}
badrun "unknown flag" --fast
badrun "flag without value" --steps
badrun "bad number" --lr abc
badrun "unknown preset" --model llama-99b
badrun "--init of a missing path" --init "$D/nothing" --steps 0
badrun "--init of a directory without weights" --init "$D" --steps 0
badrun "--resume of a file that is not a checkpoint" --resume "$D/text.txt"
badrun "--seq beyond the context" --model tiny --seq 500
$L --help > "$D/help.out" 2>&1
check "--help exits 0 and lists the flags" "[ $? = 0 ] && grep -q -- '--init' '$D/help.out' && grep -q -- '--resume' '$D/help.out'"

echo "$pass passed, $fail failed"
[ $fail = 0 ]
