#!/usr/bin/env bash
# tests/test_gpt2_ddp.sh - examples/gpt2 trained data-parallel: 2 ranks
# started torchrun-style (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
# MASTER_PORT) on loopback, each under `timeout`, so a hang is a failure.
#   1. both exit 0; only rank 0 prints the run and writes files; the
#      loss falls
#   2. equivalence: 2 ranks x --batch 2 == 1 rank x --batch 4. Rank r takes
#      the loader's global batches k*2+r of 2 windows, which are exactly
#      the 4 windows of batch k of a 1-rank run with batch 4 (the window
#      order depends only on the seed), and the averaged gradient of two
#      means over 2 rows is the mean over 4 rows. So the logged losses agree
#      within 1e-4 and the final weights within 1e-4 (max abs, by python);
#      they differ only in float rounding (the sum over rows splits in two)
#   3. with --grad-accum 2 too (no all-reduce during the first backward)
#   4. resume with 2 ranks from step 10 ends with the uninterrupted run's
#      weights bit for bit; with 1 rank it is refused (exit 2)
# Prints "N passed, M failed"; exits non-zero on failure.
set -u
cd "$(dirname "$0")/.."
G=${GPT2:-examples/gpt2}
pass=0; fail=0
ok() { pass=$((pass + 1)); echo "ok   - $1"; }
bad() { fail=$((fail + 1)); echo "FAIL - $1"; }
check() { if eval "$2"; then ok "$1"; else bad "$1"; fi; }
if [ ! -x "$G" ]; then echo "FAIL - $G is not built (./build.sh)"; echo "0 passed, 1 failed"; exit 1; fi
D=$(mktemp -d /tmp/test_gpt2_ddp.XXXXXX)
[ -n "${KEEP:-}" ] || trap 'rm -rf "$D"' EXIT
head -c 60000 train.h > "$D/text.txt"
export OMP_NUM_THREADS=1
unset RANK WORLD_SIZE LOCAL_RANK MASTER_ADDR MASTER_PORT TRN_DDP_TIMEOUT SLURM_PROCID SLURM_NTASKS \
      OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE PMI_RANK PMI_SIZE TORCHELASTIC_USE_AGENT_STORE
jget() { grep "\"$2\":" "$1" | sed -n "s/.*\"$2\":\([-0-9.eE+]*\).*/\1/p"; }
A="--model tiny --data $D/text.txt --seq 32 --sample 0 --threads 1 --warmup 0 --eval-every 10 --eval-batches 2"

# two ranks as torchrun starts them: ddp TAG ARGS...; exit codes in $codes
ddp() {
    local tag=$1 p r pids=""; shift
    p=$((20000 + (RANDOM * 7 + $$) % 30000))
    for r in 0 1; do
        RANK=$r LOCAL_RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$p \
            timeout 120 "$G" $A "$@" > "$D/$tag.$r" 2> "$D/$tag.$r.err" &
        pids="$pids $!"
    done
    codes=""
    for p in $pids; do wait "$p"; codes="$codes $?"; done
}
# max |a - b| over all tensors of two safetensors files (python), or "none"
maxdiff() {
    python3 - "$1" "$2" <<'EOF' 2>/dev/null || echo none
import sys
from safetensors.numpy import load_file
a, b = load_file(sys.argv[1]), load_file(sys.argv[2])
assert a.keys() == b.keys()
print(max(float(abs(a[k] - b[k]).max()) for k in a))
EOF
}
HAVE_PY=0
python3 -c 'import numpy, safetensors' 2>/dev/null && HAVE_PY=1

# --- 1. two ranks train; rank 0 alone speaks and writes --------------------------
ddp d2 --batch 2 --steps 30 --ckpt-every 10 --out "$D/d2" --log "$D/d2.jsonl"
check "2 ranks: both exit 0 (codes:$codes)" "[ '$codes' = ' 0 0' ]"
check "2 ranks: rank 0 says it is data-parallel over tcp" "grep -q 'ddp: 2 ranks started by torchrun, communicator tcp-ring' '$D/d2.0'"
check "2 ranks: rank 0 printed 30 step lines" "[ \$(grep -c '^step .*loss .*norm' '$D/d2.0') = 30 ]"
check "2 ranks: rank 1 printed nothing on stdout" "[ ! -s '$D/d2.1' ]"
check "2 ranks: no errors on stderr" "[ ! -s '$D/d2.0.err' ] && [ ! -s '$D/d2.1.err' ]"
check "2 ranks: one log, 30 training lines" "[ \$(jget '$D/d2.jsonl' loss | grep -c .) = 30 ]"
check "2 ranks: rank 0 wrote weights, plot, 3 checkpoints" \
    "[ -s '$D/d2/model.safetensors' ] && [ -s '$D/d2/loss.svg' ] && [ \$(ls '$D/d2'/ckpt_*.safetensors | wc -l) = 3 ]"
check "2 ranks: no per-rank files" "! ls '$D/d2' | grep -q rank"
first=$(jget "$D/d2.jsonl" loss | head -1)
last5=$(jget "$D/d2.jsonl" loss | tail -5 | awk '{s += $1} END {if (NR) print s / NR}')
check "2 ranks: loss falls ($first -> mean of last 5 = $last5)" "awk 'BEGIN {exit !($last5 < $first - 0.5)}'"

# --- 2. 2 ranks x batch 2 == 1 rank x batch 4 -----------------------------------
"$G" $A --batch 4 --steps 30 --ckpt-every 10 --out "$D/d1" --log "$D/d1.jsonl" > "$D/d1.out" 2>&1
check "1 rank, batch 4: exit 0" "[ $? = 0 ]"
check "1 rank: no ddp line (no launcher: one process)" "! grep -q '^ddp:' '$D/d1.out'"
# the largest difference of the logged values (losses, lr, gradient norm),
# relative to the value where it is above 1: the gradient norm grows to ~20,
# and float rounding of a sum split in two scales with it
dl=$(paste <(sed 's/,"ms".*//' "$D/d1.jsonl") <(sed 's/,"ms".*//' "$D/d2.jsonl") | tr -c '0-9.\t\n-' ' ' |
     awk -F'\t' '{n = split($1, a, " "); split($2, b, " "); for (i = 1; i <= n; i++) { d = a[i] - b[i]; if (d < 0) d = -d; s = a[i] < 0 ? -a[i] : a[i]; if (s > 1) d /= s; if (d > m) m = d } } END {print m + 0}')
check "equivalence: every logged value of 2x2 within 1e-4 of 1x4, relative above 1 (max diff $dl)" "awk 'BEGIN {exit !($dl < 1e-4)}'"
check "equivalence: same number of log lines" "[ \$(wc -l < '$D/d1.jsonl') = \$(wc -l < '$D/d2.jsonl') ]"
if [ $HAVE_PY = 1 ]; then
    dw=$(maxdiff "$D/d1/model.safetensors" "$D/d2/model.safetensors")
    check "equivalence: final weights of 2x2 within 1e-4 of 1x4 (max |diff| $dw)" "[ '$dw' != none ] && awk 'BEGIN {exit !($dw < 1e-4)}'"
else
    echo "skip - weight comparison (python3 with numpy and safetensors not found)"
fi

# --- 3. gradient accumulation: 2 ranks x 2 x accum 2 == 1 rank x 4 x accum 2 -----
ddp a2 --batch 2 --grad-accum 2 --steps 10 --ckpt-every 0 --out "$D/a2" --log "$D/a2.jsonl"
"$G" $A --batch 4 --grad-accum 2 --steps 10 --ckpt-every 0 --out "$D/a1" --log "$D/a1.jsonl" > "$D/a1.out" 2>&1
rc=$?
check "accumulation: 2 ranks exit 0 (codes:$codes), 1 rank exit $rc" "[ '$codes' = ' 0 0' ] && [ $rc = 0 ]"
la=$(jget "$D/a1.jsonl" loss | tail -1); lb=$(jget "$D/a2.jsonl" loss | tail -1)
check "accumulation: last loss 2 ranks $lb vs 1 rank $la (within 1e-4)" \
    "[ -n '$la' ] && [ -n '$lb' ] && awk 'BEGIN {d = $la - $lb; exit !(d < 1e-4 && d > -1e-4)}'"

# --- 4. resume: with 2 ranks it continues bit for bit; with 1 rank it is refused ---
mkdir -p "$D/r2"
cp "$D/d2/ckpt_00000010.safetensors" "$D/r2/"
A="--threads 1" ddp r2 --resume "$D/r2" --out "$D/r2"
check "resume with 2 ranks: both exit 0 (codes:$codes), from step 10" "[ '$codes' = ' 0 0' ] && grep -q 'resumed from .* at step 10' '$D/r2.0'"
check "resume with 2 ranks: final weights bit-identical to the uninterrupted run" "cmp -s '$D/d2/model.safetensors' '$D/r2/model.safetensors'"
"$G" --resume "$D/d2" --steps 40 --threads 1 --out "$D/d2" > "$D/w1.out" 2> "$D/w1.err"
rc=$?
check "resume a 2-rank run with 1 rank: exit 2, one line ($(head -1 "$D/w1.err"))" \
    "[ $rc = 2 ] && [ \$(wc -l < '$D/w1.err') = 1 ] && grep -q '2 rank(s); this run has 1' '$D/w1.err'"

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
