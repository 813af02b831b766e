#!/usr/bin/env bash
# tests/run.sh - runs every test and adds up their "N passed, M failed" lines.
#   tests/bin/test_*        C/C++ test programs (built by ./build.sh)
#   tests/bin/asan/test_*   the same, built with AddressSanitizer + UBSan
#   tests/test_*.sh         end-to-end tests of the examples (shell)
# A test that crashes, times out or prints no summary counts as one failure;
# one that prints a line starting with SKIP and "0 passed, 0 failed" could
# not run here (no root, no compiler, ...) and is listed as skipped.
# TESTS=pattern runs only the matching tests.
set -u
cd "$(dirname "$0")/.."
total_pass=0; total_fail=0; total_skip=0
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:allocator_may_return_null=1}
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}  # no spinning threads on a shared machine
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
pattern=${TESTS:-}

run_one() { # run_one NAME COMMAND...
    local name=$1; shift
    local log rc line p f t0 t1
    [ -n "$pattern" ] && [[ "$name" != *$pattern* ]] && return 0
    log=$(mktemp)
    t0=$(date +%s)
    timeout "${TEST_TIMEOUT:-900}" "$@" >"$log" 2>&1; rc=$?
    t1=$(date +%s)
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$log" | tail -1)
    if [ -n "$line" ]; then
        p=${line%% passed*}; f=${line#*, }; f=${f%% failed}
    else
        p=0; f=1
    fi
    if [ "$rc" != 0 ] && [ "$f" = 0 ]; then f=1; fi
    total_pass=$((total_pass + p)); total_fail=$((total_fail + f))
    if [ "$f" = 0 ] && [ "$p" = 0 ] && grep -q '^SKIP' "$log"; then # could not run here: say so, never "ok"
        total_skip=$((total_skip + 1))
        printf 'skip  %-34s %s\n' "$name" "$(grep -m1 '^SKIP' "$log" | cut -c1-100)"
    elif [ "$f" = 0 ]; then
        printf 'ok    %-34s %4d passed  (%ds)\n' "$name" "$p" $((t1 - t0))
    else
        printf 'FAIL  %-34s %4d passed, %d failed, exit %d  (%ds)\n' "$name" "$p" "$f" "$rc" $((t1 - t0))
        grep -v '^ok' "$log" | tail -30 | sed 's/^/      /'
    fi
    rm -f "$log"
}

for t in tests/bin/test_*; do [ -x "$t" ] && run_one "$(basename "$t")" "$t"; done
for t in tests/bin/asan/test_*; do [ -x "$t" ] && run_one "asan/$(basename "$t")" "$t"; done
for t in tests/test_*.sh; do [ -e "$t" ] && run_one "$(basename "$t")" bash "$t"; done

echo
[ "$total_skip" = 0 ] || echo "($total_skip test(s) skipped: see the skip lines above)"
echo "$total_pass passed, $total_fail failed"
[ "$total_fail" = 0 ]
