#!/usr/bin/env bash
# tests/test_kill_resume.sh - kill -9 a training run at many moments, in
# the middle of a step and in the middle of a save, resume it each time
# from its run directory, and check that:
#   - after every kill, every checkpoint file in the directory verifies
#     (a kill never leaves a broken ckpt_*.safetensors behind);
#   - the final weights file is byte-identical to an uninterrupted run's;
#   - every loss any of the interrupted processes printed equals the
#     uninterrupted run's loss at that step, bit for bit.
# The trainer is tests/bin/test_resume (tests/test_resume.c).
# TRN_CKPT_TEST_DELAY_MS makes each save sleep after every tensor it
# writes, and --step-ms makes each step sleep between forward and
# backward, so that kills land inside saves and inside steps.
set -u
cd "$(dirname "$0")/.."
bin=tests/bin/test_resume
pass=0; fail=0
ok()  { pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }
finish() { echo "$pass passed, $fail failed"; [ "$fail" = 0 ]; exit $?; }
if [ ! -x "$bin" ]; then bad "$bin is missing (run ./build.sh)"; finish; fi

tmp=$(mktemp -d /tmp/trn_kill_resume.XXXXXX)
[ -n "${KEEP_TMP:-}" ] || trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=2 OMP_WAIT_POLICY=passive
args=(--steps 90 --every 3 --keep 2 --threads 2 --step-ms 20)

# 1. the uninterrupted run
if "$bin" --dir "$tmp/ref" "${args[@]}" > "$tmp/ref.log" 2>&1; then ok; else bad "reference run failed"; cat "$tmp/ref.log"; finish; fi

# 2. the same run, killed again and again (killed_run DIR [extra flags]).
#    Kills follow events, not the clock, so a slow or busy machine changes
#    nothing: first each run takes 4 steps (so it completes at least one
#    save and the next run has something newer to resume from), then
#    save:   as soon as this process has a temp file, i.e. inside a save
#            (with --async 1 the save is a background thread's: the step
#            goes on while it writes, and the kill lands in both)
#    step:   right after a step's line, i.e. inside the next step (or save)
#    random: after 0-2 more steps and 0-40 ms more
wait_for() { # wait_for CONDITION: poll while the trainer lives (at most 120 s)
    local i
    for ((i = 0; i < 24000; i++)); do
        eval "$1" && return 0
        kill -0 "$pid" 2>/dev/null || return 1
        sleep 0.005
    done
    return 1
}
killed_run() {
    local run=$1 log=$1.log err=$1.err mode before n kills=0 in_save=0 resumed_runs out
    shift
    steps_done() { local c; c=$(grep -c '^step' "$log" 2>/dev/null); echo "${c:-0}"; }
    RANDOM=$$
    for mode in "${modes[@]}"; do
        before=$(steps_done)
        TRN_CKPT_TEST_DELAY_MS=$delay "$bin" --dir "$run" "${args[@]}" "$@" >> "$log" 2>> "$err" &
        pid=$!
        wait_for '[ "$(steps_done)" -ge $((before + 4)) ]'
        before=$(steps_done)
        case $mode in
            save)   wait_for 'compgen -G "$run/*.tmp.$pid" > /dev/null' ;;
            step)   wait_for '[ "$(steps_done)" -gt "$before" ]' ;;
            random) n=$((RANDOM % 3))
                    wait_for '[ "$(steps_done)" -ge $((before + n)) ]'
                    sleep "$(printf '0.%03d' $((RANDOM % 40)))" ;;
        esac
        kill -9 "$pid" 2>/dev/null && kills=$((kills + 1))
        wait "$pid" 2>/dev/null
        if compgen -G "$run/*.tmp.$pid" > /dev/null; then in_save=$((in_save + 1)); fi
        if [ -d "$run" ]; then
            if out=$("$bin" --verify-all "$run" 2>&1); then ok; else bad "$*: after a kill ($mode): $out"; fi
        fi
    done
    # 3. run to the end
    if TRN_CKPT_TEST_DELAY_MS=$delay "$bin" --dir "$run" "${args[@]}" "$@" >> "$log" 2>> "$err"; then ok
    else bad "$*: final resumed run failed"; tail -5 "$err"; fi
    resumed_runs=$(grep -c '^resumed from step' "$log")
    echo "${*:-sync saves}: $kills kills ($in_save inside a save, $((kills - in_save)) inside a step), $resumed_runs resumed starts"
    [ "$kills" -ge $((${#modes[@]} - 2)) ] && ok || bad "$*: only $kills kills landed"
    [ "$in_save" -ge 1 ] && ok || bad "$*: no kill landed inside a save"
    [ $((kills - in_save)) -ge 1 ] && ok || bad "$*: no kill landed inside a step"
    [ "$resumed_runs" -ge $((${#modes[@]} - 1)) ] && ok || bad "$*: only $resumed_runs runs resumed from a checkpoint"

    # 4. the same end, the same losses
    if cmp -s "$tmp/ref/final.safetensors" "$run/final.safetensors"; then ok
    else bad "$*: final weights differ from the uninterrupted run"; fi
    if [ "$(grep '^final' "$tmp/ref.log")" = "$(grep '^final' "$log" | tail -1)" ]; then ok
    else bad "$*: final weight checksums differ"; fi
    if awk 'NR == FNR { if ($1 == "step") want[$2] = $4; next }
            $1 == "step" { seen[$2] = 1; if (want[$2] != $4) { print "step " $2 ": " $4 " vs " want[$2]; bad = 1 } }
            END { for (s in want) if (!(s in seen)) { print "step " s " never ran"; bad = 1 }; exit bad }' \
            "$tmp/ref.log" "$log"; then ok
    else bad "$*: losses differ from the uninterrupted run"; fi
    if grep -v -e '^train.h: skipping' "$err" | grep -q .; then bad "$*: unexpected errors: $(head -3 "$err")"; else ok; fi
}
modes=(save step random save random step random random save random) delay=10
killed_run "$tmp/run"
# the same with asynchronous checkpoints: kills while a background thread
# writes (shorter sleeps: a save must also finish between kills sometimes)
modes=(save step save random save step random random) delay=3
killed_run "$tmp/arun" --async 1
finish
