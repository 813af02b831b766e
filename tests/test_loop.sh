#!/usr/bin/env bash
# tests/test_loop.sh - the training-loop flags of examples/gpt2 end to end
# (extras/train_loop.h and train.h's async checkpoints; tests/test_loop.c tests the
# pieces one by one):
#   1. --async-ckpt trains exactly as synchronous saves do: the same final
#      weights and the same checkpoint bytes; --keep-best K leaves the K
#      best-by-val_loss checkpoints beside the newest ones
#   2. --csv and --tensorboard: the CSV rows, and the event file read back
#      with the `tensorboard` Python package (skipped with a line where it
#      is not installed: pip install tensorboard)
#   3. --fast-dev-run: one step, one validation batch, no file written
#   4. --patience stops early with a checkpoint; --max-time stops cleanly
#      with a checkpoint that --resume continues
#   5. --skip-spikes skips updates and a resumed run skips the same ones:
#      bit-identical weights to an uninterrupted run
#   6. --limit-val-batches (a count, a fraction); --profile prints its table;
#      the step lines carry an ETA, and on a terminal (script(1)) the
#      progress line is rewritten in place
#   7. bad values exit 2 with one line
set -u
cd "$(dirname "$0")/.."
G=${GPT2:-examples/gpt2}
pass=0
fail=0
ok() { pass=$((pass + 1)); echo "ok   - $1"; }
bad() { fail=$((fail + 1)); echo "FAIL - $1"; }
check() { if eval "$2"; then ok "$1"; else bad "$1"; fi; }
if [ ! -x "$G" ]; then echo "FAIL - $G is not built (./build.sh)"; echo "0 passed, 1 failed"; exit 1; fi
D=$(mktemp -d /tmp/test_loop.XXXXXX)
[ -n "${KEEP:-}" ] || trap 'rm -rf "$D"' EXIT
export OMP_WAIT_POLICY=passive
head -c 60000 train.h > "$D/text.txt"
T="--model tiny --data $D/text.txt --batch 4 --seq 32 --sample 0 --threads 1"

# --- 1. async == sync; keep-best ------------------------------------------------
$G $T --steps 20 --eval-every 5 --eval-batches 2 --keep 1 --keep-best 2 --out "$D/sync" > "$D/sync.out" 2>&1
check "sync run (exit 0)" "[ $? = 0 ]"
$G $T --steps 20 --eval-every 5 --eval-batches 2 --keep 1 --keep-best 2 --async-ckpt --out "$D/async" > "$D/async.out" 2>&1
check "async run (exit 0)" "[ $? = 0 ]"
check "async: the lines say the save was in the background" "grep -q 'checkpoint .*(async: training waited' '$D/async.out' && grep -q '^async checkpoints: 4 written' '$D/async.out'"
check "async: final weights identical to the synchronous run" "cmp -s '$D/sync/model.safetensors' '$D/async/model.safetensors'"
check "async: the last checkpoint is byte-identical to the synchronous one" \
    "cmp -s '$D/sync/ckpt_00000020.safetensors' '$D/async/ckpt_00000020.safetensors'"
check "keep-best with synchronous saves: the same best_ files" "[ \"\$(ls '$D/sync' | grep best_)\" = \"\$(ls '$D/async' | grep best_)\" ]"
check "keep 1: one ckpt_ left" "[ \$(ls '$D/async'/ckpt_*.safetensors | wc -l) = 1 ]"
check "keep-best 2: two best_ files" "[ \$(ls '$D/async'/best_*.safetensors 2>/dev/null | wc -l) = 2 ]"
# the two lowest val_loss of steps 5..20 (the step-0 validation has no checkpoint)
want=$(grep '^step .*| val_loss' "$D/async.out" | awk '$2 > 0 {print $5, $2}' | sort -g | head -2 | awk '{printf "%08d\n", $2}' | sort | tr '\n' ' ')
got=$(ls "$D/async" | sed -n 's/^best_\([0-9]*\)\.safetensors$/\1/p' | tr '\n' ' ')
check "keep-best: the two lowest val_loss ($want) are kept ($got)" "[ '$want' = '$got' ]"

# --- 2. CSV and TensorBoard -----------------------------------------------------
$G $T --steps 6 --eval-every 3 --eval-batches 2 --out "$D/tb" --csv "$D/m.csv" --tensorboard "$D/tbdir" > "$D/tb.out" 2>&1
check "csv/tensorboard run (exit 0)" "[ $? = 0 ]"
check "csv: header + 6 rows" "[ \"\$(head -1 '$D/m.csv')\" = 'step,loss,val_loss,lr,grad_norm,ms,tok_per_s,mem_bytes,skipped' ] && [ \$(wc -l < '$D/m.csv') = 7 ]"
check "csv: val_loss only on steps 3 and 6" "[ \"\$(awk -F, 'NR > 1 && \$3 != \"\" {print \$1}' '$D/m.csv' | tr '\n' ' ')\" = '3 6 ' ]"
check "csv: the losses are the log's" "[ \"\$(awk -F, 'NR == 2 {printf \"%.4f\", \$2}' '$D/m.csv')\" = \"\$(sed -n 's/^step *1\/6 | loss \([0-9.]*\).*/\1/p' '$D/tb.out')\" ]"
check "tensorboard: one event file" "[ \$(ls '$D/tbdir' | grep -c '^events.out.tfevents.') = 1 ]"
if python3 -c 'import tensorboard' 2>/dev/null; then
    out=$(python3 - "$D/tbdir" "$D/m.csv" <<'EOF' 2>&1
import sys, csv
from tensorboard.backend.event_processing import event_accumulator
ea = event_accumulator.EventAccumulator(sys.argv[1], size_guidance={event_accumulator.SCALARS: 0})
ea.Reload()
tags = set(ea.Tags()["scalars"])
need = {"loss", "val_loss", "lr", "grad_norm", "tokens_per_s", "memory/weights", "memory/activations", "memory/rss"}
assert need <= tags, "missing tags: %s" % sorted(need - tags)
rows = list(csv.DictReader(open(sys.argv[2])))
loss = [(e.step, e.value) for e in ea.Scalars("loss")]
assert [s for s, _ in loss] == list(range(1, 7)), loss
for (s, v), r in zip(loss, rows):
    assert abs(v - float(r["loss"])) < 1e-6, (s, v, r["loss"])
val = [(e.step, round(e.value, 5)) for e in ea.Scalars("val_loss")]
assert [s for s, _ in val] == [0, 3, 6], val
print("tensorboard read", len(tags), "tags,", len(loss), "losses")
EOF
    )
    check "tensorboard: the python package reads every tag and the losses ($out)" "echo '$out' | grep -q '^tensorboard read'"
else
    echo "skipped - tensorboard is not installed here (pip install tensorboard): the event file is not read back with it"
fi

# --- 3. fast-dev-run ---------------------------------------------------------------
mkdir -p "$D/fdr"
GA=$(cd "$(dirname "$G")" && pwd)/$(basename "$G") # from another directory
(cd "$D/fdr" && "$GA" $T --fast-dev-run --out "$D/fdr/out" --log "$D/fdr/x.jsonl" --csv "$D/fdr/x.csv" --tensorboard "$D/fdr/tb" > "$D/fdr.out" 2>&1)
check "fast-dev-run: exit 0" "[ $? = 0 ]"
check "fast-dev-run: one step line, one validation" "[ \$(grep -c '^step .*loss .*lr' '$D/fdr.out') = 1 ] && [ \$(grep -c 'val_loss' '$D/fdr.out') -ge 1 ] && grep -q '^fast-dev-run: 1 training step and 1 validation batch' '$D/fdr.out'"
check "fast-dev-run: no file written" "[ -z \"\$(ls -A '$D/fdr')\" ]"

# --- 4. patience, max-time ------------------------------------------------------------
# a learning rate too small to move float32 weights: val_loss does not improve
$G $T --steps 40 --eval-every 2 --eval-batches 1 --lr 1e-12 --min-lr 1e-12 --patience 2 --out "$D/pat" > "$D/pat.out" 2>&1
check "patience: exit 0" "[ $? = 0 ]"
check "patience 2: stopped at step 4 with a checkpoint" "grep -q '^stopped at step 4: early stopping' '$D/pat.out' && [ -f '$D/pat/ckpt_00000004.safetensors' ]"
$G --resume "$D/pat" --out "$D/pat" --threads 1 --sample 0 > "$D/pat2.out" 2>&1
check "patience: its count is in the checkpoint (a resume stops at the next validation)" "grep -q 'resumed from .* at step 4' '$D/pat2.out' && grep -q '^stopped at step 6: early stopping' '$D/pat2.out'"
$G $T --steps 100000 --eval-every 0 --ckpt-every 0 --max-time 1 --out "$D/mt" > "$D/mt.out" 2>&1
check "max-time: exit 0" "[ $? = 0 ]"
s=$(sed -n 's/^stopped at step \([0-9]*\): --max-time.*/\1/p' "$D/mt.out")
check "max-time 1: stopped cleanly at step $s with a checkpoint" "[ -n '$s' ] && [ -f '$D/mt/ckpt_'\$(printf %08d $s)'.safetensors' ] && [ -f '$D/mt/model.safetensors' ]"
$G --resume "$D/mt" --out "$D/mt" --threads 1 --steps $((s + 3)) --sample 0 > "$D/mt2.out" 2>&1
check "max-time: --resume continues from step $s" "grep -q \"resumed from .* at step $s\$\" '$D/mt2.out' && grep -q \"^step *$((s + 3))/$((s + 3))\" '$D/mt2.out'"

# --- 5. spike guard: skips, and the same skips after a resume ---------------------------
# data with spikes in it, made here (not from a source file that changes):
# an easy sentence, and every 1440 bytes a line of 150 pseudo-random
# printable bytes (an LCG); batches that meet one jump in loss and norm
spiky() {
    local s=12345 i j line
    for ((i = 0; i < 20; i++)); do
        for ((j = 0; j < 60; j++)); do printf 'the cat sat on the mat. '; done
        line=""
        for ((j = 0; j < 150; j++)); do
            s=$(( (s * 1103515245 + 12345) % 2147483648 ))
            line+=$(printf "\\$(printf '%03o' $(( 33 + (s >> 16) % 94 )))")
        done
        printf '%s\n' "$line"
    done
}
spiky > "$D/spiky.txt"
SP="${T/$D\/text.txt/$D/spiky.txt} --steps 40 --warmup 10 --eval-every 0 --ckpt-every 10 --lr 2e-2 --skip-spikes 0.5"
$G $SP --out "$D/sp" > "$D/sp.out" 2>&1
n=$(grep -c 'update skipped' "$D/sp.out")
n20=$(grep 'update skipped' "$D/sp.out" | awk '$2 > 20' | wc -l)
check "skip-spikes 0.5: some updates skipped ($n, $n20 after step 20, where the resume below starts)" "[ $n20 -ge 1 ]"
mkdir -p "$D/sp2" # the checkpoint at step 20 of the same run (it has the window), and nothing newer
cp "$D/sp/ckpt_00000020.safetensors" "$D/sp2/" 2>/dev/null || ln "$D/sp/ckpt_00000020.safetensors" "$D/sp2/" 2>/dev/null
$G --resume "$D/sp2" --out "$D/sp2" --steps 40 --threads 1 --sample 0 > "$D/sp2.out" 2>&1
check "skip-spikes: resumed from step 20" "grep -q 'resumed from .* at step 20' '$D/sp2.out'"
check "skip-spikes: the same steps skipped after the resume" "[ \"\$(grep 'update skipped' '$D/sp.out' | awk '\$2 > 20 {print \$2}')\" = \"\$(grep 'update skipped' '$D/sp2.out' | awk '{print \$2}')\" ]"
check "skip-spikes: weights bit-identical to the uninterrupted run" "cmp -s '$D/sp/model.safetensors' '$D/sp2/model.safetensors'"

# --- 6. limit-val-batches, profile, progress --------------------------------------------
v1=$($G $T --steps 0 --eval-batches 1 --out "$D/v1" | sed -n 's/^final val_loss //p')
v2=$($G $T --steps 0 --limit-val-batches 1 --out "$D/v2" | sed -n 's/^final val_loss //p')
v8=$($G $T --steps 0 --out "$D/v8" | sed -n 's/^final val_loss //p')
check "limit-val-batches 1 == eval-batches 1 ($v1 $v2), != the default 8 batches ($v8)" "[ -n '$v1' ] && [ '$v1' = '$v2' ] && [ '$v1' != '$v8' ]"
v3=$($G $T --steps 0 --limit-val-batches 1.0 --out "$D/v3" | sed -n 's/^final val_loss //p')
check "limit-val-batches 1.0: the whole split, not one batch ($v3)" "[ -n '$v3' ] && [ '$v3' != '$v1' ]"
$G $T --steps 3 --eval-every 0 --profile --out "$D/pr" > "$D/pr.out" 2>&1
check "profile: a table with forward and backward of linear and attention" "grep -q '^-- profile: 3 backward passes' '$D/pr.out' && grep -q '^  linear ' '$D/pr.out' && grep -q '^  attention ' '$D/pr.out'"
check "step lines end with an ETA" "[ \$(grep -c '^step .*/3 | loss .* | eta [0-9]*:[0-9][0-9]\$' '$D/pr.out') = 3 ]"
if script -qec true /dev/null > /dev/null 2>&1; then
    script -qec "$G $T --steps 3 --eval-every 0 --out $D/tty" /dev/null > "$D/tty.out" 2>&1
    check "on a terminal: the progress line is rewritten in place" "grep -q \$'\\rstep 2/3 \\[' '$D/tty.out' && grep -q \$'\\033\\[K' '$D/tty.out'"
else
    echo "skipped - script(1) cannot make a terminal here: the in-place line is tested in tests/test_loop.c"
fi

# --- 7. bad values -------------------------------------------------------------------------
for bad_args in "--max-time 0" "--max-time 5x" "--keep-best -1" "--limit-val-batches 0" "--limit-val-batches 1.5" \
                "--skip-spikes -1" "--fast-dev-run --resume $D/sync"; do
    $G $T $bad_args --out "$D/bad" > "$D/bad.out" 2> "$D/bad.err"
    check "bad input '$bad_args': exit 2 with one line" "[ $? = 2 ] && [ \$(wc -l < '$D/bad.err') = 1 ]"
done
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
