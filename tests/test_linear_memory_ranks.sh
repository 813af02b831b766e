#!/usr/bin/env bash
# tests/test_linear_memory_ranks.sh - examples/linear_memory at 2 ranks
# (torchrun's variables, loopback) with --shard none|zero1|zero2|fsdp, at
# --width 1000:
#   - every rank exits 0; the four modes end with the same loss and the
#     same parameter checksum (to float tolerance: they take the same steps)
#   - rank 0 prints a row per rank, predicted beside measured; the kit's
#     peak of every rank is within 5% + 2 MB of the prediction
#   - every sharded mode predicts less than none (with two big layers and 2
#     ranks FSDP holds up to three layers whole: 4S + 3 blocks, about 3.5 P,
#     no less than zero1's 2P + 2S = 3 P; see >>ranks in the example)
# Prints "N passed, M failed"; exits non-zero on failure.
set -u
cd "$(dirname "$0")/.."
bin=examples/linear_memory
pass=0; fail=0
ok() { pass=$((pass + 1)); echo "ok   - $1"; }
bad() { fail=$((fail + 1)); echo "FAIL - $1"; }
check() { if eval "$2"; then ok "$1"; else bad "$1"; fi; }
if [ ! -x "$bin" ]; then echo "FAIL - $bin not built"; echo "0 passed, 1 failed"; exit 1; fi
D=$(mktemp -d /tmp/test_lm_ranks.XXXXXX)
[ -n "${KEEP:-}" ] || trap 'rm -rf "$D"' EXIT
export OMP_NUM_THREADS=1
unset RANK WORLD_SIZE LOCAL_RANK MASTER_ADDR MASTER_PORT TRN_DDP_TIMEOUT SLURM_PROCID SLURM_NTASKS \
      OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE PMI_RANK PMI_SIZE TORCHELASTIC_USE_AGENT_STORE
val() { sed -n "s/^$2 //p" "$D/$1.0"; }
for mode in none zero1 zero2 fsdp; do
    p=$((20000 + (RANDOM * 7 + $$) % 30000)); pids=""
    for r in 0 1; do
        RANK=$r LOCAL_RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$p timeout 120 \
            "$bin" --width 1000 --threads 1 --steps 3 --no-save --shard $mode --out "$D/$mode" > "$D/$mode.$r" 2>&1 &
        pids="$pids $!"
    done
    codes=""; for q in $pids; do wait "$q"; codes="$codes $?"; done
    check "$mode: both ranks exit 0 (codes:$codes)" "[ \"\$codes\" = ' 0 0' ]"
    check "$mode: rank 0 prints a row per rank" "[ \"\$(grep -A4 'predicted vs measured' $D/$mode.0 | grep -c '^  [01] ')\" = 2 ]"
    rows=$(grep -A4 'predicted vs measured' "$D/$mode.0" | grep '^  [01] ')
    check "$mode: every rank's kit peak within 5% + 2 MB of the prediction" \
          "echo \"\$rows\" | awk '{ d = \$3 - \$2; if (d < 0) d = -d; if (d > 0.05 * \$2 + 0.002) bad = 1 } END { exit bad }'"
done
for mode in zero1 zero2 fsdp; do
    check "$mode: the loss of none ($(val $mode loss_final) vs $(val none loss_final))" \
          "awk 'BEGIN { a = $(val $mode loss_final); b = $(val none loss_final); d = a - b; if (d < 0) d = -d; exit !(d <= 1e-6 + 1e-5 * b) }'"
    check "$mode: the parameter checksum of none" \
          "awk 'BEGIN { a = $(val $mode param_checksum); b = $(val none param_checksum); d = a - b; if (d < 0) d = -d; exit !(d <= 1e-5 * (b < 0 ? -b : b) + 1e-6) }'"
done
pr() { val "$1" max_rank_predicted_bytes; }
check "predicted: zero1, zero2, fsdp < none ($(pr zero1) $(pr zero2) $(pr fsdp) < $(pr none))" \
      "[ $(pr fsdp) -lt $(pr none) ] && [ $(pr zero1) -lt $(pr none) ] && [ $(pr zero2) -lt $(pr none) ]"
grep -A4 'predicted vs measured' "$D/fsdp.0" | sed 's/^/     [fsdp] /'
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
