#!/usr/bin/env bash
# tests/test_cuda_asan.sh - shows that a kernel run by the CUDA-on-CPU harness
# (tests/cuda_on_cpu.h) that writes out of bounds is CAUGHT: the harness
# self-test is built with AddressSanitizer + UBSan (its `// build:` line), and
# its demo modes launch a kernel that writes one element past a cudaMalloc
# block, or past a __shared__ array. Each demo must die with a report that
# names the kernel.
set -u
cd "$(dirname "$0")/.."
bin=tests/bin/test_cuda_harness
pass=0; fail=0
if [ ! -x "$bin" ]; then
    echo "test_cuda_asan.sh: $bin not built (run ./build.sh)"; echo "0 passed, 1 failed"; exit 1
fi
demo() { # demo FLAG PATTERN KERNEL
    local out rc
    out=$(ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=print_stacktrace=1 "$bin" "$1" 2>&1); rc=$?
    if [ "$rc" != 0 ] && grep -qE "$2" <<<"$out" && grep -q "$3" <<<"$out"; then
        echo "ok   $1: exit $rc, report names $3"; pass=$((pass + 1))
    else
        echo "FAIL $1: exit $rc, no '$2' report naming $3:"; sed 's/^/     /' <<<"$out" | head -20
        fail=$((fail + 1))
    fi
}
demo --oob-demo "heap-buffer-overflow" oob_kernel
demo --oob-shared-demo "out of bounds|global-buffer-overflow" oob_shared_kernel
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
