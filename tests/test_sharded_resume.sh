#!/usr/bin/env bash
# tests/test_sharded_resume.sh - what a sharded checkpoint promises, tried
# as a user would break it (issue 24), with examples/gpt2 --shard fsdp at 2
# ranks (torchrun's variables, loopback TCP) and tools/consolidate:
#   - "shards from different saves are accepted": a rank file of another
#     step dropped into ckpt_6.shards: consolidate refuses it (exit 1, one
#     line naming the file); --resume DIR skips it, saying so
#   - "no fallback past a corrupt sharded checkpoint": the newest one with
#     a corrupt rank file is skipped (its file and the checksum named) and
#     the run resumes from the previous one, on both ranks, exit 0
#   - "--resume DIR without --out writes somewhere else": the resumed run
#     saves into DIR, not ./runs/gpt2 of wherever it was started
#   - "FIFOs hang every loader": a FIFO as --init, as the newest checkpoint
#     in a --resume DIR, as a rank file for tools/consolidate, as --data, as
#     the tokenizer's vocab.json: a one-line refusal (or a skip), never a
#     hang (each run under `timeout 60`)
# Prints "N passed, M failed"; exits non-zero on failure.
set -u
cd "$(dirname "$0")/.."
R=$PWD
G=$R/${GPT2:-examples/gpt2}
C=$R/tools/consolidate
pass=0; fail=0
ok() { pass=$((pass + 1)); echo "ok   - $1"; }
bad() { fail=$((fail + 1)); echo "FAIL - $1"; }
check() { if eval "$2"; then ok "$1"; else bad "$1"; fi; }
for p in "$G" "$C"; do
    if [ ! -x "$p" ]; then echo "FAIL - $p is not built (./build.sh)"; echo "0 passed, 1 failed"; exit 1; fi
done
D=$(mktemp -d /tmp/test_sharded_resume.XXXXXX)
[ -n "${KEEP:-}" ] || trap 'rm -rf "$D"' EXIT
head -c 30000 train.h > "$D/text.txt"
export OMP_NUM_THREADS=1
unset RANK WORLD_SIZE LOCAL_RANK MASTER_ADDR MASTER_PORT TRN_DDP_TIMEOUT SLURM_PROCID SLURM_NTASKS \
      OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE PMI_RANK PMI_SIZE TORCHELASTIC_USE_AGENT_STORE
A="--model mini --data $D/text.txt --seq 16 --batch 1 --sample 0 --threads 1 --warmup 0 --eval-batches 1"
# run TAG ARGS...: 2 ranks from the directory $D/cwd; exit codes in $codes
mkdir -p "$D/cwd"
run() {
    local tag=$1 p r pids=""; shift
    p=$((20000 + (RANDOM * 7 + $$) % 30000))
    for r in 0 1; do
        (cd "$D/cwd" && RANK=$r LOCAL_RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$p TRN_DDP_TIMEOUT=30 \
            timeout 120 "$G" $A "$@" > "$D/$tag.$r" 2> "$D/$tag.$r.err") &
        pids="$pids $!"
    done
    codes=""
    for p in $pids; do wait "$p"; codes="$codes $?"; done
}
S="--shard fsdp --eval-every 2 --ckpt-every 2 --keep 5"
run first $S --steps 6 --out "$D/run"
check "fsdp, 2 ranks, 6 steps: exit 0 (codes:$codes), checkpoints at 2, 4, 6" \
      "[ \"\$codes\" = ' 0 0' ] && [ -f $D/run/ckpt_00000006.shards/manifest.json ] && [ -f $D/run/ckpt_00000004.shards/manifest.json ]"
cp -r "$D/run" "$D/pristine"

# --- a rank file of another save (step 4's, same run) in ckpt_6 ------------------
cp "$D/pristine/ckpt_00000004.shards/rank-00001-of-00002.safetensors" "$D/run/ckpt_00000006.shards/"
"$C" "$D/run/ckpt_00000006.shards" "$D/mixed.safetensors" > "$D/cons.out" 2>&1
rc=$?
check "shards from different saves: consolidate exits 1 naming the file, writes nothing ($(tail -1 "$D/cons.out"))" \
      "[ $rc = 1 ] && [ \$(wc -l < $D/cons.out) = 1 ] && grep -q 'rank-00001-of-00002.safetensors: from another save' $D/cons.out && [ ! -e $D/mixed.safetensors ]"
run mixed $S --steps 8 --resume "$D/run"
check "shards from different saves: --resume DIR skips ckpt_6 saying why, resumes at 4, exit 0 (codes:$codes)" \
      "[ \"\$codes\" = ' 0 0' ] && grep -q 'skipping a broken sharded checkpoint: .*ckpt_00000006.shards/rank-00001-of-00002.safetensors: from another save' $D/mixed.0.err && grep -q 'resumed from .*ckpt_00000004.shards at step 4' $D/mixed.0"

# --- a corrupt rank file in the newest ------------------------------------------------
rm -rf "$D/run" && cp -r "$D/pristine" "$D/run"
f="$D/run/ckpt_00000006.shards/rank-00001-of-00002.safetensors"
size=$(stat -c %s "$f")
printf '\x55' | dd of="$f" bs=1 seek=$((size - 100)) conv=notrunc status=none
run corrupt $S --steps 8 --resume "$D/run"
check "no fallback past a corrupt sharded checkpoint: skipped (file and checksum named), resumed at 4, exit 0 (codes:$codes)" \
      "[ \"\$codes\" = ' 0 0' ] && grep -q 'skipping a broken sharded checkpoint: .*rank-00001-of-00002.safetensors.*\(checksum\|CRC\)' $D/corrupt.0.err && grep -q 'resumed from .*ckpt_00000004.shards at step 4' $D/corrupt.0"
# --- --resume DIR without --out saves into DIR ----------------------------------------
check "--resume DIR without --out writes into DIR: $D/run has ckpt_8 and model.safetensors, no runs/ where it started" \
      "[ -f $D/run/ckpt_00000008.shards/manifest.json ] && [ -f $D/run/model.safetensors ] && [ ! -e $D/cwd/runs ]"
rm -rf "$D/all_bad" && cp -r "$D/pristine" "$D/all_bad"
for s in 2 4 6; do rm "$D/all_bad/ckpt_0000000$s.shards/rank-00000-of-00002.safetensors"; done
run allbad $S --steps 8 --resume "$D/all_bad"
check "every sharded checkpoint broken: exit 2 on both ranks with one line ($(tail -1 $D/allbad.0.err))" \
      "[ \"\$codes\" = ' 2 2' ] && grep -q 'no valid sharded checkpoint (3 broken' $D/allbad.0.err"

# --- FIFOs: a refusal or a skip, never a hang -----------------------------------------
mkfifo "$D/fifo.safetensors"
cp -r "$D/pristine/ckpt_00000006.shards" "$D/fifo.shards"
rm "$D/fifo.shards/rank-00001-of-00002.safetensors" && mkfifo "$D/fifo.shards/rank-00001-of-00002.safetensors"
timeout 60 "$C" "$D/fifo.shards" "$D/fifo_out.safetensors" > "$D/cfifo.out" 2>&1
rc=$?
check "FIFO as a rank file: consolidate exits 1 at once ($(tail -1 $D/cfifo.out))" \
      "[ $rc = 1 ] && grep -q 'rank-00001-of-00002.safetensors: a FIFO, not a regular file' $D/cfifo.out"
(cd "$D/cwd" && timeout 60 "$G" $A --steps 1 --init "$D/fifo.safetensors" --out "$D/i" > "$D/ififo.out" 2>&1)
rc=$?
check "FIFO as --init: exit 2 at once ($(tail -1 $D/ififo.out))" "[ $rc = 2 ] && grep -q 'a FIFO, not a regular file' $D/ififo.out"
(cd "$D/cwd" && timeout 60 "$G" $A --steps 2 --eval-every 2 --out "$D/one" > "$D/one.out" 2>&1)
mkfifo "$D/one/ckpt_00000009.safetensors"
(cd "$D/cwd" && timeout 60 "$G" $A --steps 3 --resume "$D/one" > "$D/rfifo.out" 2>&1)
rc=$?
check "FIFO as the newest checkpoint in --resume DIR: skipped, resumed at 2, exit 0 (rc $rc)" \
      "[ $rc = 0 ] && grep -q 'ckpt_00000009.safetensors: a FIFO' $D/rfifo.out && grep -q 'resumed from .*ckpt_00000002.safetensors at step 2' $D/rfifo.out"
mkfifo "$D/fifo.txt"
(cd "$D/cwd" && timeout 60 "$G" $A --steps 1 --data "$D/fifo.txt" --out "$D/d" > "$D/dfifo.out" 2>&1)
rc=$?
check "FIFO as --data: exit 2 at once ($(tail -1 $D/dfifo.out))" "[ $rc = 2 ] && grep -q 'fifo.txt: a FIFO, not a regular file' $D/dfifo.out"
mkdir -p "$D/bpe" && mkfifo "$D/bpe/vocab.json" && printf '#version: 0.2\n' > "$D/bpe/merges.txt"
(cd "$D/cwd" && timeout 60 "$G" $A --steps 1 --bpe "$D/bpe" --out "$D/b" > "$D/bfifo.out" 2>&1)
rc=$?
check "FIFO as the tokenizer's vocab.json: exit 2 at once ($(tail -1 $D/bfifo.out))" \
      "[ $rc = 2 ] && grep -q 'vocab.json: a FIFO, not a regular file' $D/bfifo.out"
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
