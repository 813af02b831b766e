#!/usr/bin/env bash
# examples/step_by_step: the MLP learns (final loss < 0.02), step 2 allocates
# nothing, and the hand-written backward equals the tape's gradients exactly.
cd "$(dirname "$0")/.." || exit 1
pass=0; fail=0
ok() { if eval "$1"; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL: $2"; fi; }
out=$(./examples/step_by_step --steps 300 --threads 2 2>&1); rc=$?
ok '[ $rc = 0 ]' "exit code $rc"
loss=$(echo "$out" | sed -n 's/^ final_loss //p')
ok 'awk -v l="$loss" "BEGIN{exit !(l != \"\" && l < 0.02)}"' "final loss $loss should be < 0.02"
step2=$(echo "$out" | sed -n '/^ step 2$/,/trn_adamw_step/p' | cut -d'|' -f1)
ok '[ -n "$step2" ] && ! echo "$step2" | grep -q "+"' "step 2 allocates nothing"
ok 'echo "$out" | grep -q "hand-written gradients: 0$"' "tape == by-hand gradients"
./examples/step_by_step --bogus >/dev/null 2>&1; rc=$?
ok '[ $rc = 2 ]' "bad flag exits 2 (got $rc)"
echo "$pass passed, $fail failed"
[ $fail = 0 ]
