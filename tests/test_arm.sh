#!/usr/bin/env bash
# test_arm.sh - the CPU kernels on AArch64: the NEON paths of train.h (the
# sgemm micro-kernel and its packing, the flash-attention tile GEMM, AdamW)
# and the loops the compiler vectorizes for NEON, tested like the CUDA
# harness tests CUDA: cross-compiled with Debian's aarch64-linux-gnu-gcc and
# run under qemu-aarch64 (user-mode emulation), so an x86 machine checks
# them. Each C test below is the same program the x86 suite runs, comparing
# the fast kernels against their plain references, and the same bits for 1,
# 2 and 3 threads.
#
# Which tests: every tests/test_*.c, the whole C suite (20 programs: the
# kernels with a NEON path, and the loaders, checkpoints, data, DDP ranks
# and loop, whose plain C the compiler vectorizes for NEON): the builds two
# at a time (JOBS), then the programs one by one under qemu, which runs the
# emulated code ~10-30x slower. On a quiet 2-core AMD EPYC: 3 min 17 s
# (4 min 43 s with one build at a time).
# TEST_ARM_ONLY="test_a test_b" runs the ones named; TEST_ARM_QUICK=1 the
# six that reach the NEON kernels (matmul, attention, ops*, optim).
#
# Needs: gcc-aarch64-linux-gnu, libc6-dev-arm64-cross and qemu-user
# (Debian); without them it prints a SKIP line.
set -u
cd "$(dirname "$0")/.."
CC=${ARM_CC:-aarch64-linux-gnu-gcc}
QEMU=${ARM_QEMU:-qemu-aarch64}
skip() { echo "SKIP: $1"; echo "0 passed, 0 failed"; exit 0; }
command -v "$CC" >/dev/null 2>&1 || skip "no $CC (Debian packages gcc-aarch64-linux-gnu libc6-dev-arm64-cross)"
command -v "$QEMU" >/dev/null 2>&1 || skip "no $QEMU (Debian package qemu-user)"
SYSROOT=${ARM_SYSROOT:-/usr/aarch64-linux-gnu}
export QEMU_LD_PREFIX=$SYSROOT
export OMP_WAIT_POLICY=passive
export TEST_RUNNER=$QEMU # a test that runs itself again (test_first_use) runs it under qemu
tmp=$(mktemp -d "${TMPDIR:-/tmp}/test_arm.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT

pass=0; fail=0
ok() { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1"; }

# the compiler targets NEON (every AArch64 CPU has it), so the kit takes
# its NEON paths: the macro must be there, and the kernels must use it
if "$CC" -dM -E - < /dev/null 2>/dev/null | grep -q '__ARM_NEON 1'; then
    ok "$CC defines __ARM_NEON"
else
    bad "$CC does not define __ARM_NEON: the NEON paths are not tested"
fi

if [ -n "${TEST_ARM_ONLY:-}" ]; then
    tests=$TEST_ARM_ONLY
elif [ "${TEST_ARM_QUICK:-0}" = 1 ]; then
    tests="test_matmul test_attention test_optim test_ops test_ops_decoder test_ops_shape_loss"
else
    tests=$(ls tests/test_*.c | sed 's|tests/||; s|\.c$||')
fi
flags="-O2 -fopenmp -Wall -Wextra -Wno-unused-parameter -Wno-unused-function -I. -std=c99 -D_DEFAULT_SOURCE -D_POSIX_C_SOURCE=200809L"
# the cross builds, JOBS at a time; each writes $tmp/T (the program) and
# $tmp/T.build (what the compiler printed), or $tmp/T.failed
build_one() {
    local t=$1 src=tests/$1.c extra
    extra=$(sed -n '1,60s|^// build: ||p' "$src" | head -1)
    # shellcheck disable=SC2086
    "$CC" $flags -o "$tmp/$t" "$src" $extra -lm > "$tmp/$t.build" 2>&1 || touch "$tmp/$t.failed"
}
jobs_max=${JOBS:-$(nproc 2>/dev/null || echo 2)}
for t in $tests; do
    [ -e "tests/$t.c" ] || continue
    while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do wait -n; done
    build_one "$t" &
done
wait
for t in $tests; do
    src=tests/$t.c
    [ -e "$src" ] || { bad "$t: $src missing"; continue; }
    if [ -e "$tmp/$t.failed" ]; then
        bad "$t: cross build failed"; tail -20 "$tmp/$t.build"; continue
    fi
    # warnings are shown (as build.sh shows them), not counted: the kit's own
    # x86 builds decide what warns
    if grep -q . "$tmp/$t.build"; then echo "note $t: the cross build printed:"; head -20 "$tmp/$t.build"; fi
    # the NEON micro-kernel is in the binary: fmla on 4-float vectors
    if [ "$t" = test_matmul ]; then
        if command -v aarch64-linux-gnu-objdump >/dev/null 2>&1; then
            n=$(aarch64-linux-gnu-objdump -d "$tmp/$t" | grep -c 'fmla.*v[0-9]*\.4s')
            if [ "$n" -ge 24 ]; then ok "$t: $n NEON fmla instructions"; else bad "$t: only $n NEON fmla instructions"; fi
        fi
    fi
    # shellcheck disable=SC2086
    timeout "${TEST_ARM_TIMEOUT:-600}" "$QEMU" "$tmp/$t" > "$tmp/$t.log" 2>&1; rc=$?
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$tmp/$t.log" | tail -1)
    if [ "$rc" = 0 ] && [ -n "$line" ] && [ "${line#*, }" = "0 failed" ]; then
        ok "$t under $QEMU: $line"
    else
        bad "$t under $QEMU: exit $rc, ${line:-no summary}"; grep -v '^ok' "$tmp/$t.log" | tail -20
    fi
done
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
