#!/usr/bin/env bash
# examples/custom_op: a user's op (swish with a learnable beta) passes both
# gradient checks, the model with it learns (the example exits 1 otherwise),
# and bad flags exit 2.
cd "$(dirname "$0")/.." || exit 1
pass=0; fail=0
ok() { if eval "$1"; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL: $2"; fi; }
if [ ! -x examples/custom_op ]; then echo "examples/custom_op is not built"; echo "0 passed, 1 failed"; exit 1; fi
out=$(./examples/custom_op --steps 400 --threads 2 2>&1); rc=$?
ok '[ $rc = 0 ]' "exit code $rc: $out"
ok '[ "$(echo "$out" | grep -c "^gradcheck .*-> ok$")" = 2 ]' "both gradient checks pass"
first=$(echo "$out" | sed -n 's/^final_loss \([0-9.]*\) (first \([0-9.]*\))$/\2/p')
last=$(echo "$out" | sed -n 's/^final_loss \([0-9.]*\) (first.*/\1/p')
ok 'awk -v a="$last" -v b="$first" "BEGIN{exit !(a != \"\" && a < 0.3 * b)}"' "loss $first -> $last should fall below 30%"
./examples/custom_op --bogus >/dev/null 2>&1; rc=$?
ok '[ $rc = 2 ]' "bad flag exits 2 (got $rc)"
./examples/custom_op --hidden 0 >/dev/null 2>&1; rc=$?
ok '[ $rc = 2 ]' "--hidden 0 exits 2 (got $rc)"
echo "$pass passed, $fail failed"
[ $fail = 0 ]
