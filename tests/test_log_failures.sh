#!/usr/bin/env bash
# tests/test_log_failures.sh - examples/gpt2's log and plot (issue 24):
#   - "--log failures are silent": --log /dev/full (every write fails: a
#     full disk) stops the run with exit 2 and one line naming the log,
#     not exit 0 with a log cut mid-record; a FIFO as --log or --csv that
#     no process reads is refused at once (it blocked the open forever),
#     and one that a process reads gets the records; a directory as --csv
#     is one line
#   - "the loss plot is lost on resume": without --log the run's history
#     goes to OUT/log.jsonl, so resuming a finished run redraws loss.svg
#     with every step, not one point
# Prints "N passed, M failed"; exits non-zero on failure.
set -u
cd "$(dirname "$0")/.."
G=${GPT2:-examples/gpt2}
pass=0; fail=0
ok() { pass=$((pass + 1)); echo "ok   - $1"; }
bad() { fail=$((fail + 1)); echo "FAIL - $1"; }
check() { if eval "$2"; then ok "$1"; else bad "$1"; fi; }
if [ ! -x "$G" ]; then echo "FAIL - $G is not built (./build.sh)"; echo "0 passed, 1 failed"; exit 1; fi
D=$(mktemp -d /tmp/test_log_failures.XXXXXX)
[ -n "${KEEP:-}" ] || trap 'rm -rf "$D"' EXIT
head -c 30000 train.h > "$D/text.txt"
A="--model mini --data $D/text.txt --seq 16 --batch 2 --sample 0 --threads 1 --eval-batches 1"

if [ -w /dev/full ]; then
    timeout 60 "$G" $A --steps 2 --log /dev/full --out "$D/full" > "$D/full.out" 2>&1
    rc=$?
    check "--log /dev/full: exit 2 with one line naming the log ($(grep -- '--log' "$D/full.out" | tail -1))" \
          "[ $rc = 2 ] && grep -q -- '--log: a write failed: No space left on device' $D/full.out"
else
    echo "SKIP --log /dev/full: no /dev/full here"
fi
mkfifo "$D/fifo"
for flag in --log --csv; do
    timeout 60 "$G" $A --steps 2 $flag "$D/fifo" --out "$D/fifo_run" > "$D/fifo.out" 2>&1
    rc=$?
    check "$flag FIFO nobody reads: exit 2 at once, not a hang (rc $rc: $(tail -1 "$D/fifo.out"))" \
          "[ $rc = 2 ] && grep -q -- '$flag .*fifo: a FIFO that no process reads' $D/fifo.out"
    timeout 60 cat "$D/fifo" > "$D/fifo.read" & reader=$!
    sleep 0.5 # (the reader opens the FIFO first)
    timeout 60 "$G" $A --steps 2 $flag "$D/fifo" --out "$D/fifo_run" > "$D/fifo.out" 2>&1
    rc=$?
    wait $reader
    check "$flag FIFO that a process reads: exit 0 (rc $rc), the reader got the records ($(wc -l < "$D/fifo.read") lines)" \
          "[ $rc = 0 ] && grep -q 'loss' $D/fifo.read"
done
timeout 60 "$G" $A --steps 2 --csv "$D" --out "$D/dir_run" > "$D/dir.out" 2>&1
rc=$?
check "--csv DIRECTORY: exit 2, one line ($(tail -1 "$D/dir.out"))" "[ $rc = 2 ] && grep -q -- '--csv .*: a directory, not a file to write to' $D/dir.out"

# loss.svg: training points (the blue polyline's pairs) and validation dots
train_points() { grep -o 'stroke="#1f77b4" stroke-width="1.2" points="[^"]*"' "$1" | sed 's/.*points="//' | wc -w; }
val_dots() { grep -c '<circle cx="[0-9.-]*" cy="[0-9.-]*" r="3.5" fill="#ff7f0e"/>$' "$1"; }
"$G" $A --steps 6 --eval-every 2 --out "$D/run" > "$D/run.out" 2>&1
n1=$(train_points "$D/run/loss.svg"); v1=$(val_dots "$D/run/loss.svg")
check "a 6-step run without --log: loss.svg has a point per step ($n1 >= 6) and its validations ($v1), OUT/log.jsonl exists" \
      "[ $n1 -ge 6 ] && [ $v1 -ge 3 ] && [ -f $D/run/log.jsonl ]"
"$G" $A --steps 6 --resume "$D/run" --out "$D/run" > "$D/res.out" 2>&1
rc=$?
n2=$(train_points "$D/run/loss.svg"); v2=$(val_dots "$D/run/loss.svg")
check "resuming the finished run (exit $rc) redraws loss.svg with every step: $n2 training points (was $n1), $v2 validations" \
      "[ $rc = 0 ] && [ $n2 = $n1 ] && [ $v2 -ge $v1 ]"
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
