#!/usr/bin/env bash
# tests/test_linear_memory.sh - examples/linear_memory at --width 2000: the
# ledger arithmetic of the memory experiment, and the fused step's result.
#
#   standard step: peak of each kind exactly weights = P, gradients = P,
#     optimizer = 2P; the kit's peak total within 2% of 4P + small terms
#     (activations, temporaries, tables, each bounded on its own)
#   --fused-step:  gradients = one block only; peak within 2% of
#     3P + block + small terms
#   P is recomputed here from the width: 4 * (2W^2 + 3W + 1) bytes.
#   The fused step and the standard one without clipping take the same
#   steps (same losses, same weights); --fused-step with --clip is refused.
#   --async-ckpt trains the same, and its staging copy is exactly 3P.
set -u
cd "$(dirname "$0")/.."
bin=examples/linear_memory
pass=0; fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
check() { if eval "$1"; then ok; else bad "$2"; fi; }

if [ ! -x "$bin" ]; then echo "FAIL: $bin not built"; echo "0 passed, 1 failed"; exit 1; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

W=2000; B=8
run() { # run NAME ARGS...: output in $tmp/NAME.txt, exit code in $tmp/NAME.rc
    local name=$1; shift
    "$bin" --width $W --batch $B --threads 1 --out "$tmp/$name" "$@" >"$tmp/$name.txt" 2>&1
    echo $? >"$tmp/$name.rc"
}
val() { awk -v k="$2" '$1 == k { print $2 }' "$tmp/$1.txt" | tail -1; }
# cmp_float A OP B: awk arithmetic comparisons on the values
fcheck() { awk "BEGIN { exit !($1) }"; }

run std
run std0 --clip 0
run fused --fused-step
for r in std std0 fused; do
    check '[ "$(cat $tmp/$r.rc)" = 0 ]' "$r run exited $(cat $tmp/$r.rc): $(tail -3 $tmp/$r.txt)"
done

P=$(( 4 * (2 * W * W + 3 * W + 1) ))
R=$(( W / 64 ))
BLOCK=$(( 4 * (R * W + R + B * R) ))
for r in std fused; do
    check '[ "$(val $r param_count)" = $(( P / 4 )) ]' "$r: param_count $(val $r param_count), want $((P / 4))"
    check '[ "$(val $r param_bytes)" = $P ]' "$r: param_bytes $(val $r param_bytes), want $P"
    check '[ "$(val $r peak_weights_bytes)" = $P ]' "$r: weights peak $(val $r peak_weights_bytes), want $P"
    check '[ "$(val $r peak_optimizer_bytes)" = $((2 * P)) ]' "$r: optimizer peak $(val $r peak_optimizer_bytes), want 2P = $((2 * P))"
    # the small terms, each bounded on its own: activations of a batch of
    # B rows (a dozen (B,W) tensors and their gradients), the checkpoint's
    # staging buffer (<= 4 MiB) plus matmul packing, the tables
    act=$(val $r peak_activations_bytes); tmpb=$(val $r peak_temporary_bytes)
    comm=$(val $r peak_communication_bytes); rt=$(val $r peak_runtime_bytes)
    check '[ "$act" -gt 0 ] && [ "$act" -le $(( 16 * B * W * 4 )) ]' "$r: activations $act > 16 (B,W) tensors"
    check '[ "$tmpb" -le $(( 8 << 20 )) ]' "$r: temporaries $tmpb > 8 MiB"
    check '[ "$comm" -le $(( 256 << 10 )) ] && [ "$rt" -le $(( 1 << 20 )) ]' "$r: comm $comm / runtime $rt too big"
    small=$(( act + tmpb + comm + rt ))
    peak=$(val $r peak_kit_bytes)
    if [ $r = std ]; then
        check '[ "$(val std peak_gradients_bytes)" = $P ]' "std: gradients peak $(val std peak_gradients_bytes), want $P"
        check '[ "$(val std block_bytes)" = 0 ]' "std: block_bytes should be 0"
        want=$(( 4 * P + small ))
    else
        check '[ "$(val fused block_bytes)" = $BLOCK ]' "fused: block_bytes $(val fused block_bytes), want $BLOCK"
        check '[ "$(val fused peak_gradients_bytes)" = $BLOCK ]' "fused: gradients peak $(val fused peak_gradients_bytes), want one block $BLOCK"
        want=$(( 3 * P + BLOCK + small ))
    fi
    check 'fcheck "$peak >= $want * 0.98 && $peak <= $want * 1.02"' "$r: peak_kit_bytes $peak not within 2% of $want"
    # the OS agrees: every counted byte was touched, and not much else was
    rss=$(val $r peak_rss_bytes); rss0=$(val $r start_rss_bytes)
    check 'fcheck "$rss >= $peak - $tmpb - $act && $rss <= $rss0 + $peak + 16 * 1048576"' \
        "$r: peak RSS $rss vs kit peak $peak (start $rss0)"
    check 'fcheck "$(val $r loss_step2) < $(val $r loss_step1)"' "$r: loss did not go down: $(val $r loss_step1) -> $(val $r loss_step2)"
    svg=$tmp/$r/linear_memory$([ $r = fused ] && echo _fused).svg
    check '[ -s "$svg" ] && grep -q "</svg>" "$svg" && [ "$(grep -c "<title>.*weights" "$svg")" = 10 ]' "$r: chart $svg"
    ck=$tmp/$r/linear_memory$([ $r = fused ] && echo _fused).safetensors
    size=$(stat -c %s "$ck" 2>/dev/null || echo 0)
    check '[ "$size" -gt $(( 3 * P )) ] && [ "$size" -lt $(( 3 * P + 65536 )) ]' "$r: checkpoint $ck is $size bytes, want 3P + header"
done
# fused: 3P instead of 4P
check 'fcheck "$(val fused peak_kit_bytes) < $(val std peak_kit_bytes) - 0.95 * $P"' "fused peak is not ~P below the standard one"
# the fused step is the same optimizer: same losses and weights as the
# standard step without clipping (float sums in another order: tolerance)
for k in loss_step2 loss_final param_checksum; do
    a=$(val std0 $k); b=$(val fused $k)
    check 'awk -v a="$a" -v b="$b" "BEGIN { d = a - b; if (d < 0) d = -d; m = a < 0 ? -a : a; exit !(a != \"\" && d <= 1e-5 * m + 1e-7) }"' \
        "$k: standard (--clip 0) $a vs fused $b"
done
# and tensor by tensor, from the two checkpoints (weights, m, v): with one
# thread both compute every product in the same order, so they agree to
# the last bit or nearly (1e-8 is a few float steps at the weights' scale)
if python3 -c "import numpy, safetensors" 2>/dev/null; then
    python3 - "$tmp/std0/linear_memory.safetensors" "$tmp/fused/linear_memory_fused.safetensors" >"$tmp/cmp.txt" 2>&1 <<'PY'
import sys
import numpy as np
from safetensors.numpy import load_file
a, b = load_file(sys.argv[1]), load_file(sys.argv[2])
bad = sorted(set(a) ^ set(b))
for k in sorted(set(a) & set(b)):
    d = float(np.abs(a[k].astype(np.float64) - b[k].astype(np.float64)).max())
    tol = 1e-8 if not k.startswith("optim.") else 1e-5 * float(np.abs(a[k]).max())
    print(k, d, tol)
    if d > tol: bad.append(k)
print("BAD" if bad else "SAME", bad)
PY
    check 'grep -q "^SAME" "$tmp/cmp.txt" && grep -q "^optim.v" "$tmp/cmp.txt"' "checkpoints differ: $(cat $tmp/cmp.txt)"
else
    echo "note: python3 numpy/safetensors missing: checkpoint comparison skipped"
fi
check '[ "$(val std loss_final)" != "$(val std0 loss_final)" ]' "clipping changed nothing (norm should exceed 1 on step 1)"

# --async-ckpt: the same training (losses, weights); the staging copy is
# its own ledger line of exactly 3P (weights + m + v); with --ckpt-every
# the first save is written while steps 3-4 run; both files are complete
run sync4 --steps 4 --ckpt-every 2
run async4 --steps 4 --ckpt-every 2 --async-ckpt
check '[ "$(cat $tmp/async4.rc)" = 0 ]' "async run exited $(cat $tmp/async4.rc): $(tail -3 $tmp/async4.txt)"
check '[ "$(val sync4 param_checksum)" = "$(val async4 param_checksum)" ] && [ "$(val sync4 loss_final)" = "$(val async4 loss_final)" ]' \
    "async: weights or loss differ from the synchronous run"
check '[ "$(val async4 peak_staging_bytes)" = $((3 * P)) ] && [ "$(val sync4 peak_staging_bytes)" = 0 ]' \
    "async: staging peak $(val async4 peak_staging_bytes), want 3P = $((3 * P)) (sync: $(val sync4 peak_staging_bytes))"
check 'grep -q "checkpoint after step 2: .*ckpt_00000002.safetensors (training waited" "$tmp/async4.txt" && [ -f "$tmp/async4/ckpt_00000004.safetensors" ] && [ ! -f "$tmp/async4/ckpt_00000002.safetensors" ]' \
    "async: ckpt 2 written, then replaced by ckpt 4 (keep 1): $(ls $tmp/async4)"
if [ -x tests/bin/test_resume ]; then
    check 'tests/bin/test_resume --verify-all "$tmp/async4" > /dev/null' "async: the checkpoint does not verify"
fi

# bad input: one clear line on stderr, exit 2
expect2() { # expect2 WHAT ARGS...
    local what=$1; shift
    "$bin" "$@" >"$tmp/err.out" 2>"$tmp/err.txt"; local rc=$?
    if [ $rc = 2 ] && [ "$(wc -l <"$tmp/err.txt")" = 1 ]; then ok; else bad "$what: exit $rc, stderr: $(cat "$tmp/err.txt")"; fi
}
expect2 "fused + clip" --fused-step --clip 1 --width 64 --out "$tmp/x"
grep -q "clip" "$tmp/err.txt" && grep -q "fused" "$tmp/err.txt" && ok || bad "fused + clip message: $(cat $tmp/err.txt)"
expect2 "bad width" --width abc
expect2 "width too small" --width 1
expect2 "unknown flag" --frobnicate 3
expect2 "missing value" --width
expect2 "unwritable --out" --width 64 --out /proc/nope/x
"$bin" --help >"$tmp/help.txt" 2>&1 && grep -q -- "--fused-step" "$tmp/help.txt" && ok || bad "--help"

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
