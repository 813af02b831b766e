#!/usr/bin/env bash
# tests/test_resume_flags.sh - a flag given again on --resume wins over the
# checkpoint's settings, in what AdamW uses and in what the next checkpoint
# records (examples/gpt2 --resume DIR --weight-decay 0.5):
#   1. a run of 4 steps with weight decay 0.1 leaves its checkpoints
#   2. three copies resume it to step 8: with --weight-decay 0.5, with no
#      flag, with --weight-decay 0.1 (the saved value, given again)
#   3. the 0.5 run prints and records 0.5 (trn.optim.weight_decay, the
#      optimizer's own field, and run.weight_decay); the others 0.1
#   4. the 0.5 run's weights differ from the no-flag run's (AdamW used 0.5),
#      and 0.1 given again equals no flag bit for bit
# Prints "N passed, M failed"; exits non-zero on failure.
set -u
cd "$(dirname "$0")/.."
G=${GPT2:-examples/gpt2}
pass=0
fail=0
ok() { pass=$((pass + 1)); echo "ok   - $1"; }
bad() { fail=$((fail + 1)); echo "FAIL - $1"; }
if [ ! -x "$G" ]; then echo "FAIL - $G is not built (./build.sh)"; echo "0 passed, 1 failed"; exit 1; fi
D=$(mktemp -d /tmp/test_resume_flags.XXXXXX)
trap 'rm -rf "$D"' EXIT
head -c 40000 train.h > "$D/text.txt"
small="--data $D/text.txt --batch 4 --seq 32 --threads 2 --eval-batches 1 --sample 0"

# a metadata value of a safetensors file: its JSON header is at the start
meta() { head -c 65536 "$1" | tr -d '\0' | grep -a -o "\"$2\":\"[^\"]*\"" | head -1 | sed 's/.*:"\(.*\)"/\1/'; }

# --- 1. the first run, weight decay 0.1 (the default) -------------------------
if ! $G $small --steps 4 --eval-every 2 --out "$D/first" > "$D/first.out" 2>&1; then
    bad "the first run (exit code $?)"; tail -5 "$D/first.out"; echo "$pass passed, $fail failed"; exit 1
fi
ok "the first run: 4 steps"
c4="$D/first/ckpt_00000004.safetensors"
[ "$(meta "$c4" trn.optim.weight_decay)" = 0.10000000149011612 ] || [ "$(meta "$c4" trn.optim.weight_decay)" = 0.1 ] &&
    ok "its checkpoint records weight decay 0.1 ($(meta "$c4" trn.optim.weight_decay))" ||
    bad "its checkpoint records weight decay '$(meta "$c4" trn.optim.weight_decay)', want 0.1"

# --- 2. three resumes ------------------------------------------------------------
for v in wd05:--weight-decay:0.5 noflag wd01:--weight-decay:0.1; do
    name=${v%%:*}
    flags=""; [ "$v" != noflag ] && flags="${v#*:}" && flags=${flags/:/ }
    mkdir -p "$D/$name" && cp "$D"/first/ckpt_*.safetensors "$D/$name/"
    # shellcheck disable=SC2086
    if $G $small --steps 8 --resume "$D/$name" --out "$D/$name" $flags > "$D/$name.out" 2>&1; then
        ok "resume $name ($flags) to step 8"
    else
        bad "resume $name ($flags): exit code $?"; tail -5 "$D/$name.out"
    fi
done

# --- 3. what each says and records ---------------------------------------------
grep -q 'AdamW wd 0.5,' "$D/wd05.out" && ok "--weight-decay 0.5 on resume: printed" || bad "not printed: $(grep AdamW "$D/wd05.out")"
c8="$D/wd05/ckpt_00000008.safetensors"
[ "$(meta "$c8" trn.optim.weight_decay)" = 0.5 ] && ok "the next checkpoint's optimizer records 0.5" ||
    bad "the next checkpoint's trn.optim.weight_decay is '$(meta "$c8" trn.optim.weight_decay)', want 0.5"
[ "$(meta "$c8" run.weight_decay)" = 0.5 ] && ok "the next checkpoint's run.weight_decay is 0.5" ||
    bad "the next checkpoint's run.weight_decay is '$(meta "$c8" run.weight_decay)', want 0.5"
w=$(meta "$D/noflag/ckpt_00000008.safetensors" trn.optim.weight_decay)
case "$w" in 0.1 | 0.10000000149011612) ok "no flag: the checkpoint's 0.1 carries on ($w)" ;; *) bad "no flag: weight decay '$w'" ;; esac

# --- 4. AdamW really used them ------------------------------------------------------
if cmp -s "$D/wd05/model.safetensors" "$D/noflag/model.safetensors"; then
    bad "the weights after resuming with --weight-decay 0.5 equal those with 0.1: AdamW ignored the flag"
else
    ok "the weights after resuming with --weight-decay 0.5 differ from those with 0.1"
fi
cmp -s "$D/wd01/model.safetensors" "$D/noflag/model.safetensors" &&
    ok "--weight-decay 0.1 given again (the saved value) == no flag, bit for bit" ||
    bad "--weight-decay 0.1 given again differs from no flag"

# --- 5. issue 24 item 15: --model on --resume is not silently ignored -----------
mkdir -p "$D/model" && cp "$D"/first/ckpt_*.safetensors "$D/model/"
if $G $small --steps 5 --resume "$D/model" --model gpt2 --out "$D/model" > "$D/model.out" 2>&1 &&
   grep -q 'note: --resume wins over --model gpt2' "$D/model.out"; then
    ok "--model gpt2 on --resume of a mini checkpoint: a note says the checkpoint's model is resumed"
else
    bad "--model on --resume: no note ($(tail -1 "$D/model.out"))"
fi
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
