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

# 2. the same run, killed again and again. Kills follow events, not the
#    clock, so a slow or busy machine changes nothing:
#    first each run takes 4 steps (so it completes at least one save and
#    the next run has something newer to resume from), then
#    save:   as soon as this process has a temp file, i.e. inside a save
#    step:   right after a step's line, i.e. inside the next step (or save)
#    random: after 0-2 more steps and 0-40 ms more
steps_done() { local n; n=$(grep -c '^step' "$tmp/run.log" 2>/dev/null); echo "${n:-0}"; }
wait_for() { # wait_for CONDITION: poll while the trainer lives (at most 120 s)
    local i
    for ((i = 0; i < 24000; i++)); do
        eval "$1" && return 0
        kill -0 "$pid" 2>/dev/null || return 1
        sleep 0.005
    done
    return 1
}
kills=0; in_save=0
RANDOM=$$
for mode in save step random save random step random random save random; do
    before=$(steps_done)
    TRN_CKPT_TEST_DELAY_MS=10 "$bin" --dir "$tmp/run" "${args[@]}" >> "$tmp/run.log" 2>> "$tmp/run.err" &
    pid=$!
    wait_for '[ "$(steps_done)" -ge $((before + 4)) ]'
    before=$(steps_done)
    case $mode in
        save)   wait_for 'compgen -G "$tmp/run/*.tmp.$pid" > /dev/null' ;;
        step)   wait_for '[ "$(steps_done)" -gt "$before" ]' ;;
        random) n=$((RANDOM % 3))
                wait_for '[ "$(steps_done)" -ge $((before + n)) ]'
                sleep "$(printf '0.%03d' $((RANDOM % 40)))" ;;
    esac
    kill -9 "$pid" 2>/dev/null && kills=$((kills + 1))
    wait "$pid" 2>/dev/null
    if compgen -G "$tmp/run/*.tmp.$pid" > /dev/null; then in_save=$((in_save + 1)); fi
    if [ -d "$tmp/run" ]; then
        if out=$("$bin" --verify-all "$tmp/run" 2>&1); then ok; else bad "after a kill ($mode): $out"; fi
    fi
done
# 3. run to the end
if TRN_CKPT_TEST_DELAY_MS=10 "$bin" --dir "$tmp/run" "${args[@]}" >> "$tmp/run.log" 2>> "$tmp/run.err"; then ok
else bad "final resumed run failed"; tail -5 "$tmp/run.err"; fi
resumed_runs=$(grep -c '^resumed from step' "$tmp/run.log")
echo "$kills kills ($in_save inside a save, $((kills - in_save)) inside a step), $resumed_runs resumed starts"
[ "$kills" -ge 8 ] && ok || bad "only $kills kills landed"
[ "$in_save" -ge 1 ] && ok || bad "no kill landed inside a save"
[ $((kills - in_save)) -ge 1 ] && ok || bad "no kill landed inside a step"
[ "$resumed_runs" -ge 9 ] && ok || bad "only $resumed_runs runs resumed from a checkpoint"

# 4. the same end, the same losses
if cmp -s "$tmp/ref/final.safetensors" "$tmp/run/final.safetensors"; then ok
else bad "final weights differ from the uninterrupted run"; fi
if [ "$(grep '^final' "$tmp/ref.log")" = "$(grep '^final' "$tmp/run.log" | tail -1)" ]; then ok
else bad "final weight checksums differ"; fi
if awk 'NR == FNR { if ($1 == "step") want[$2] = $4; next }
        $1 == "step" { seen[$2] = 1; if (want[$2] != $4) { print "step " $2 ": " $4 " vs " want[$2]; bad = 1 } }
        END { for (s in want) if (!(s in seen)) { print "step " s " never ran"; bad = 1 }; exit bad }' \
        "$tmp/ref.log" "$tmp/run.log"; then ok
else bad "losses differ from the uninterrupted run"; fi
if grep -v -e '^train.h: skipping' "$tmp/run.err" | grep -q .; then bad "unexpected errors: $(head -3 "$tmp/run.err")"; else ok; fi
finish
