#!/usr/bin/env bash
# tests/run.sh - runs every test and adds up their "N passed, M failed" lines.
#   tests/bin/test_*        C/C++ test programs (built by ./build.sh)
#   tests/bin/asan/test_*   the same, built with AddressSanitizer + UBSan
#   tests/test_*.sh         end-to-end tests of the examples (shell)
# A test that crashes, times out or prints no summary counts as one failure;
# one that prints a line starting with SKIP and "0 passed, 0 failed" could
# not run here (no root, no compiler, ...) and is listed as skipped.
# TESTS=pattern runs only the matching tests; TEST_LANES=1 runs them all in
# one lane (by default the CUDA-harness programs run beside the rest).
set -u
cd "$(dirname "$0")/.."
total_pass=0; total_fail=0; total_skip=0
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:allocator_may_return_null=1}
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}  # no spinning threads on a shared machine
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
pattern=${TESTS:-}

# a test's time limit: 900 s, or its source's `// timeout: SECONDS` line
limit_of() { # limit_of NAME
    local src t
    for src in "tests/${1#asan/}.c" "tests/${1#asan/}.cpp"; do
        [ -e "$src" ] && t=$(sed -n '1,60s|^// timeout: ||p' "$src" | head -1) && [ -n "$t" ] && { echo "$t"; return; }
    done
    echo 900
}

run_one() { # run_one NAME COMMAND...
    local name=$1; shift
    local log rc line p f t0 t1
    [ -n "$pattern" ] && [[ "$name" != *$pattern* ]] && return 0
    log=$(mktemp)
    t0=$(date +%s)
    timeout "${TEST_TIMEOUT:-$(limit_of "$name")}" "$@" >"$log" 2>&1; rc=$?
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
        report=$(printf 'skip  %-34s %s' "$name" "$(grep -m1 '^SKIP' "$log" | cut -c1-100)")
    elif [ "$f" = 0 ]; then
        report=$(printf 'ok    %-34s %4d passed  (%ds)' "$name" "$p" $((t1 - t0)))
    else
        report=$(printf 'FAIL  %-34s %4d passed, %d failed, exit %d  (%ds)\n' "$name" "$p" "$f" "$rc" $((t1 - t0))
                 grep -v '^ok' "$log" | tail -30 | sed 's/^/      /')
    fi
    printf '%s\n' "$report" # one write: the two lanes below share this output
    rm -f "$log"
}

# Two lanes where there are two cores: the CUDA-on-CPU harness programs
# (tests/bin/test_cuda_*: one thread each, long, no clocks or timeouts of
# their own) run one after another beside everything else, which keeps its
# order. TEST_LANES=1 runs all in one lane.
harness_lane=0
if [ "${TEST_LANES:-2}" -ge 2 ] && [ "$(nproc 2>/dev/null || echo 1)" -ge 2 ]; then
    harness_lane=1
    lane_sums=$(mktemp)
    (
        for t in tests/bin/test_cuda_*; do [ -x "$t" ] && run_one "$(basename "$t")" "$t"; done
        echo "$total_pass $total_fail $total_skip" > "$lane_sums"
    ) &
    lane_pid=$!
fi

for t in tests/bin/test_*; do
    [ "$harness_lane" = 1 ] && [[ "$t" == tests/bin/test_cuda_* ]] && continue
    [ -x "$t" ] && run_one "$(basename "$t")" "$t"
done
for t in tests/bin/asan/test_*; do [ -x "$t" ] && run_one "asan/$(basename "$t")" "$t"; done
for t in tests/test_*.sh; do [ -e "$t" ] && run_one "$(basename "$t")" bash "$t"; done
if [ "$harness_lane" = 1 ]; then
    wait "$lane_pid"
    read -r p f k < "$lane_sums" || { p=0; f=1; k=0; echo "FAIL  the harness lane left no sums"; }
    total_pass=$((total_pass + p)); total_fail=$((total_fail + f)); total_skip=$((total_skip + k))
    rm -f "$lane_sums"
fi

echo
[ "$total_skip" = 0 ] || echo "($total_skip test(s) skipped: see the skip lines above)"
echo "$total_pass passed, $total_fail failed"
[ "$total_fail" = 0 ]
