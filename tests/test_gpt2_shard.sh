#!/usr/bin/env bash
# tests/test_gpt2_shard.sh - examples/gpt2 --shard none|zero1|zero2|fsdp at
# 2 and 4 ranks (torchrun's variables, loopback TCP, each rank under
# `timeout`): for 50 steps of the mini model, W ranks x --batch 1 log the
# same losses as one process x --batch W (rank r takes the loader's global
# batches k*W+r, which are the rows of the one process's batch k), to
# float tolerance: the modes differ only in where the sums are made.
#   - every rank exits 0; rank 0 prints the per-rank memory table
#   - max |loss(W ranks, mode) - loss(1 process)| over the 50 steps <= 2e-3
#     (50 AdamW steps carry the rounding of sums made in another order)
#   - the table says what each mode keeps: the weights column is the whole
#     model for none/zero1/zero2 and a shard for fsdp; optimizer shrinks W
#     times from zero1 on
#   - sharded checkpoints (fsdp, 2 ranks): resumed from step 10, the run
#     ends with the uninterrupted run's model.safetensors bit for bit;
#     tools/consolidate (when built) gives the same tensors
# Prints "N passed, M failed"; exits non-zero on failure.
set -u
cd "$(dirname "$0")/.."
G=${GPT2:-examples/gpt2}
pass=0; fail=0
ok() { pass=$((pass + 1)); echo "ok   - $1"; }
bad() { fail=$((fail + 1)); echo "FAIL - $1"; }
check() { if eval "$2"; then ok "$1"; else bad "$1"; fi; }
if [ ! -x "$G" ]; then echo "FAIL - $G is not built (./build.sh)"; echo "0 passed, 1 failed"; exit 1; fi
D=$(mktemp -d /tmp/test_gpt2_shard.XXXXXX)
[ -n "${KEEP:-}" ] || trap 'rm -rf "$D"' EXIT
# fixed text (not the repository's own files, which change with every
# edit and would move the 50-step trajectories): C-like lines from an LCG
awk 'BEGIN { split("int float for while return if else the kit ops tensor grad loss step data model layer", w, " ");
             s = 12345; n = 0
             while (n < 60000) { line = ""
                 for (k = 0; k < 8; k++) { s = (s * 1103515245 + 12345) % 2147483648; line = line w[1 + int(s / 65536) % 18] (k < 7 ? " " : ";") }
                 print line; n += length(line) + 1 } }' > "$D/text.txt"
export OMP_NUM_THREADS=1
unset RANK WORLD_SIZE LOCAL_RANK MASTER_ADDR MASTER_PORT TRN_DDP_TIMEOUT SLURM_PROCID SLURM_NTASKS \
      OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE PMI_RANK PMI_SIZE TORCHELASTIC_USE_AGENT_STORE
A="--model mini --data $D/text.txt --seq 32 --sample 0 --threads 1 --warmup 0 --lr 5e-4 --eval-every 25 --eval-batches 2"
A="$A --ckpt-every 0 --steps 50"
losses() { sed -n 's/.*"loss":\([-0-9.eE+]*\).*/\1/p' "$1"; }
# max |a - b| over two loss columns; "none" if the counts differ or are 0
maxdiff() {
    paste <(losses "$1") <(losses "$2") | awk -v na="$(losses "$1" | wc -l)" -v nb="$(losses "$2" | wc -l)" '
        { d = $1 - $2; if (d < 0) d = -d; if (d > m) m = d }
        END { if (na != nb || na == 0) print "none"; else printf "%.3g\n", m }'
}
# run TAG W ARGS...: W ranks as torchrun starts them; exit codes in $codes
run() {
    local tag=$1 w=$2 p r pids=""; shift 2
    p=$((20000 + (RANDOM * 7 + $$) % 30000))
    for ((r = 0; r < w; r++)); do
        RANK=$r LOCAL_RANK=$r WORLD_SIZE=$w MASTER_ADDR=127.0.0.1 MASTER_PORT=$p \
            timeout 300 "$G" $A --out "$D/$tag" --log "$D/$tag.jsonl" "$@" > "$D/$tag.$r" 2> "$D/$tag.$r.err" &
        pids="$pids $!"
    done
    codes=""
    for p in $pids; do wait "$p"; codes="$codes $?"; done
}

for w in 2 4; do
    "$G" $A --batch $w --out "$D/ref$w" --log "$D/ref$w.jsonl" > "$D/ref$w.out" 2>&1
    check "one process, batch $w: 50 steps logged" "[ \"\$(losses $D/ref$w.jsonl | wc -l)\" = 50 ]"
    for mode in none zero1 zero2 fsdp; do
        run "$mode$w" $w --batch 1 --shard $mode
        check "$mode, $w ranks: all exit 0 (codes:$codes)" "[ \"\$codes\" = \"$(printf ' 0%.0s' $(seq $w))\" ]"
        d=$(maxdiff "$D/ref$w.jsonl" "$D/$mode$w.jsonl")
        echo "     $mode, $w ranks: max |loss - one process| over 50 steps = $d"
        check "$mode, $w ranks: the losses of one process (max diff $d <= 2e-3)" \
              "[ \"$d\" != none ] && awk 'BEGIN { exit !($d <= 2e-3) }'"
        check "$mode, $w ranks: rank 0 prints one memory line per rank" \
              "[ \"\$(grep -A$((w + 1)) 'memory per rank' $D/$mode$w.0 | grep -c '^ *[0-9]\+ ')\" = $w ]"
    done
    # the weights column (MiB) and the optimizer column of rank 0, per mode
    col() { grep -A2 'memory per rank' "$D/$1$w.0" | tail -1 | awk -v c="$2" '{ gsub(/[()]/, ""); print $c }'; }
    check "$w ranks: fsdp keeps about 1/$w of the weights that none keeps ($(col fsdp 2) vs $(col none 2) MiB)" \
          "awk 'BEGIN { exit !($(col fsdp 2) * $w < $(col none 2) * 1.01 + 0.05) }'"
    check "$w ranks: zero1's optimizer is 1/$w of none's ($(col zero1 7) vs $(col none 7) MiB)" \
          "awk 'BEGIN { d = $(col zero1 7) * $w - $(col none 7); exit !(d < 0.2 && d > -0.2) }'"
done
# sharded checkpoints: an FSDP run of 20 steps saves ckpt_10.shards and
# ckpt_20.shards (every rank its slice); resumed from step 10 it ends with
# the same weights, bit for bit; tools/consolidate turns ckpt_20.shards
# into the final model's tensors
B="--batch 1 --shard fsdp --steps 20 --eval-every 10 --ckpt-every 10"
run full 2 $B
check "fsdp checkpoints: all exit 0 (codes:$codes)" "[ \"\$codes\" = ' 0 0' ]"
check "ckpt_00000010.shards: a manifest and one file per rank" \
      "[ -f $D/full/ckpt_00000010.shards/manifest.json ] && [ \$(ls $D/full/ckpt_00000010.shards/rank-*-of-00002.safetensors | wc -l) = 2 ]"
mkdir -p "$D/res" && cp -r "$D/full/ckpt_00000010.shards" "$D/res/"
run res 2 $B --resume "$D/res"
check "resumed at step 10: all exit 0 (codes:$codes)" "[ \"\$codes\" = ' 0 0' ] && grep -q 'resumed from .*ckpt_00000010.shards at step 10' $D/res.0"
check "resumed run = the uninterrupted one: model.safetensors bit for bit" "cmp -s $D/full/model.safetensors $D/res/model.safetensors"
"$G" $A --batch 1 --steps 20 --resume "$D/res/ckpt_00000010.shards" --out "$D/one" > "$D/one.out" 2>&1
rc=$?
check "resuming a 2-rank sharded checkpoint with 1 rank is refused: exit $rc, $(tail -1 $D/one.out)" \
      "[ $rc = 2 ] && grep -q 'run of 2 rank' $D/one.out"
if [ -x tools/consolidate ]; then
    tools/consolidate "$D/full/ckpt_00000020.shards" "$D/merged.safetensors" > /dev/null 2>&1
    check "tools/consolidate: one file" "[ -f $D/merged.safetensors ]"
    if python3 -c 'import numpy, safetensors' 2>/dev/null; then
        d=$(python3 - "$D/full/model.safetensors" "$D/merged.safetensors" <<'EOF'
import sys
from safetensors.numpy import load_file
a, b = load_file(sys.argv[1]), load_file(sys.argv[2])
print("same" if a.keys() == b.keys() and all((a[k] == b[k]).all() and a[k].shape == b[k].shape for k in a) else "differ")
EOF
)
        check "consolidated = the final model.safetensors, tensor by tensor (python safetensors: $d)" "[ \"$d\" = same ]"
    fi
fi
for m in none zero1 zero2 fsdp; do grep -A3 'memory per rank' "$D/${m}2.0" | sed "s/^/     [$m] /"; done
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
