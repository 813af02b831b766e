#!/usr/bin/env bash
# tests/test_cuda_sanitizers.sh - shows that bugs in kernels run by the
# CUDA-on-CPU harness (tests/cuda_on_cpu.h) are CAUGHT, by running demo
# kernels that have them; each demo must fail with a report naming it:
#   AddressSanitizer (tests/bin/test_cuda_harness is built with it):
#     --oob-demo            a kernel writes one float past its cudaMalloc block
#     --oob-shared-demo     a kernel writes past a __shared__ array
#   ThreadSanitizer (tests/bin/test_cuda_race is built with it):
#     --race-demo           rows with the same id added with += instead of
#                           atomicAdd (the sum comes out right!)
#     --race-demo-barrier   a reduction missing the barrier in its loop, in
#                           a thread order where the sum comes out right
set -u
cd "$(dirname "$0")/.."
pass=0; fail=0
demo() { # demo BINARY FLAG PATTERN KERNEL
    local out rc
    if [ ! -x "$1" ]; then
        echo "FAIL $1 not built (run ./build.sh)"; fail=$((fail + 1)); return
    fi
    out=$(ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=print_stacktrace=1 "$1" "$2" 2>&1); rc=$?
    if [ "$rc" != 0 ] && grep -qE "$3" <<<"$out" && grep -q "$4" <<<"$out"; then
        echo "ok   $(basename "$1") $2: exit $rc, '$(grep -oE "$3" <<<"$out" | head -1)' in $4"
        pass=$((pass + 1))
    else
        echo "FAIL $(basename "$1") $2: exit $rc, no '$3' report naming $4:"
        sed 's/^/     /' <<<"$out" | head -20
        fail=$((fail + 1))
    fi
}
demo tests/bin/test_cuda_harness --oob-demo "heap-buffer-overflow" oob_kernel
demo tests/bin/test_cuda_harness --oob-shared-demo "out of bounds|global-buffer-overflow" oob_shared_kernel
demo tests/bin/test_cuda_race --race-demo "ThreadSanitizer: data race" racy_scatter
demo tests/bin/test_cuda_race --race-demo-barrier "ThreadSanitizer: data race" block_sum_no_loop_barrier
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
