#!/usr/bin/env bash
# tests/test_vit.sh - end-to-end tests of examples/vit and tools/fashion_mnist_png:
#   1. a generated two-class PNG set (horizontal vs vertical stripes) is
#      learned to >= 95% training accuracy in a few seconds
#   2. a folder with corrupt files (truncated PNG, text named .png, empty
#      file) trains on the good images and reports exactly the bad ones;
#      an RGB image in a gray set is converted, or skipped with --strict-channels
#   3. an interrupted run resumed from its checkpoint continues bit for bit
#   (and after 1: --async-ckpt, --csv, --tensorboard, --profile, the ETA)
#   4. bad flags and missing folders give exit code 2 and one clear line
# Prints "N passed, M failed"; exits non-zero on failure.
set -u
cd "$(dirname "$0")/.."
pass=0; fail=0
ok()  { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1"; }
check() { # check DESCRIPTION COMMAND...
    local what=$1; shift
    if "$@"; then ok "$what"; else bad "$what"; fi
}
# value KEY FILE: the number on the last "KEY <number>" line
value() { sed -n "s/^$1 \([0-9.]*\)$/\1/p" "$2" | tail -1; }
ge() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a != "" && a + 0 >= b + 0) }'; }

VIT=examples/vit; TOOL=tools/fashion_mnist_png
if [ ! -x "$VIT" ] || [ ! -x "$TOOL" ]; then
    if [ ! -f /usr/include/stb/stb_image.h ]; then
        echo "skip: libstb-dev is not installed (examples/vit is not built)"
        echo "0 passed, 0 failed"; exit 0
    fi
    echo "FAIL $VIT or $TOOL not built (run ./build.sh)"; echo "0 passed, 1 failed"; exit 1
fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
# a small model: 16x16 images, 4x4 patches -> 16 tokens
SMALL="--size 16 --patch 4 --dim 32 --depth 2 --heads 2 --batch 16 --lr 3e-3 --threads 2"

# --- 1. the toy set is learned -------------------------------------------------
"$TOOL" --make-toy "$tmp/toy" --toy-n 64 --toy-size 16 --seed 7 >"$tmp/make.log" 2>&1
check "make-toy writes 2x64 train and 2x16 test PNGs" \
    test "$(find "$tmp/toy/train" -name '*.png' | wc -l)" = 128 -a "$(find "$tmp/toy/test" -name '*.png' | wc -l)" = 32
"$VIT" --data "$tmp/toy" --out "$tmp/run1" $SMALL --epochs 6 >"$tmp/run1.log" 2>&1
rc=$?
check "toy run exits 0" test "$rc" = 0
check "toy train_acc >= 0.95 (got $(value train_acc "$tmp/run1.log"))" ge "$(value train_acc "$tmp/run1.log")" 0.95
check "toy test_acc >= 0.90 (got $(value test_acc "$tmp/run1.log"))" ge "$(value test_acc "$tmp/run1.log")" 0.90
check "toy run reports 0 bad images" test "$(value bad_images "$tmp/run1.log")" = 0
check "predictions.png is a PNG" \
    test "$(head -c 8 "$tmp/run1/predictions.png" 2>/dev/null | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a
check "a checkpoint was written" test -n "$(ls "$tmp/run1"/ckpt_*.safetensors 2>/dev/null)"
check "confusion matrix printed" grep -q "^confusion matrix" "$tmp/run1.log"
[ "$fail" = 0 ] || sed 's/^/      /' "$tmp/run1.log" | tail -20
"$VIT" --data "$tmp/toy" --out "$tmp/gelu" $SMALL --epochs 6 --act gelu >"$tmp/gelu.log" 2>&1
check "toy with --act gelu: train_acc >= 0.95 (got $(value train_acc "$tmp/gelu.log"))" ge "$(value train_acc "$tmp/gelu.log")" 0.95

# the loop extras (extras/train_loop.h): async checkpoints write the same bytes;
# CSV one row per epoch; TensorBoard event file; the profile table; an ETA
"$VIT" --data "$tmp/toy" --out "$tmp/async" $SMALL --epochs 6 --async-ckpt --csv "$tmp/v.csv" \
    --tensorboard "$tmp/tb" --profile >"$tmp/async.log" 2>&1
check "--async-ckpt: the last checkpoint is byte-identical to the synchronous run's" \
    cmp -s "$tmp/run1/ckpt_00000048.safetensors" "$tmp/async/ckpt_00000048.safetensors"
check "--csv: a header and 6 epoch rows" test "$(wc -l < "$tmp/v.csv")" = 7
check "--tensorboard: an event file" test -n "$(ls "$tmp/tb"/events.out.tfevents.* 2>/dev/null)"
check "--profile: a table with linear and attention" grep -q "^  attention " "$tmp/async.log"
check "epoch lines carry an ETA" test "$(grep -c '^epoch .*eta [0-9]*:[0-9][0-9])$' "$tmp/async.log")" = 6
# piped, it still shows progress: the loading line first, then 10 step
# lines an epoch (here 8 steps an epoch: 7 step lines, then the epoch's)
check "a log starts with the loading line" grep -q "^loading .*/toy/train and .*/toy/test" <(head -1 "$tmp/async.log")
check "a log gets 7 step lines an epoch, each with an ETA (got $(grep -c '^step [0-9]*/48 | loss [0-9.]* | [0-9]* img/s | eta [0-9]*:[0-9][0-9]$' "$tmp/async.log"))" \
    test "$(grep -c '^step [0-9]*/48 | loss [0-9.]* | [0-9]* img/s | eta [0-9]*:[0-9][0-9]$' "$tmp/async.log")" = 42

# --- 2. corrupt files are skipped and reported ---------------------------------
cp -r "$tmp/toy" "$tmp/bad"
d="$tmp/bad/train/horizontal"
head -c 60 "$d/0000.png" >"$d/truncated.png"        # PNG header, then nothing
echo "this is not an image" >"$d/text.png"
: >"$tmp/bad/train/vertical/empty.png"
mkdir "$tmp/bad/train/vertical/folder.png"            # not a file: ignored
echo "ignored: not an image extension" >"$d/notes.txt"
printf 'P6\n2 2\n255\n\377\0\0\0\377\0\0\0\377\377\377\377' >"$d/rgb.ppm"  # 3 channels
"$VIT" --data "$tmp/bad" --out "$tmp/run2" $SMALL --epochs 6 >"$tmp/run2.log" 2>&1
rc=$?
check "corrupt set: exit 0" test "$rc" = 0
check "corrupt set: bad_images 3 (got $(value bad_images "$tmp/run2.log"))" test "$(value bad_images "$tmp/run2.log")" = 3
check "corrupt set: the RGB image is converted (converted_images 1)" test "$(value converted_images "$tmp/run2.log")" = 1
check "corrupt set: truncated.png named, as truncated" grep -q "skip .*/truncated.png: truncated" "$tmp/run2.log"
check "corrupt set: text.png named, as not an image" grep -q "skip .*/text.png: not an image" "$tmp/run2.log"
check "corrupt set: empty.png named, as empty" grep -q "skip .*/empty.png: empty file" "$tmp/run2.log"
check "corrupt set: count line" grep -q "skipped 3 bad image files of 132" "$tmp/run2.log"
check "corrupt set: still learns (train_acc $(value train_acc "$tmp/run2.log"))" ge "$(value train_acc "$tmp/run2.log")" 0.95
"$VIT" --data "$tmp/bad" --out "$tmp/run3" $SMALL --epochs 1 --strict-channels >"$tmp/run3.log" 2>&1
check "--strict-channels: the RGB image is skipped too (bad_images 4)" test "$(value bad_images "$tmp/run3.log")" = 4
check "--strict-channels: says why" grep -q "rgb.ppm: wrong channel count (3 channels, model takes 1)" "$tmp/run3.log"
[ "$fail" = 0 ] || sed 's/^/      /' "$tmp/run2.log" | tail -20

# --- 3. resume continues the run bit for bit -----------------------------------
"$VIT" --data "$tmp/toy" --out "$tmp/full" $SMALL --epochs 4 >"$tmp/full.log" 2>&1
"$VIT" --data "$tmp/toy" --out "$tmp/part" $SMALL --epochs 4 --stop-after 2 >"$tmp/part.log" 2>&1
check "--stop-after 2 stops after epoch 2" grep -q "^stopping after epoch 2" "$tmp/part.log"
"$VIT" --data "$tmp/toy" --out "$tmp/part" $SMALL --epochs 4 --resume "$tmp/part" >"$tmp/resumed.log" 2>&1
check "resume picks up the newest checkpoint" grep -q "^resumed from .*ckpt_00000016.safetensors at step 16" "$tmp/resumed.log"
# epochs 3 and 4: loss and accuracies identical to the uninterrupted run
strip() { grep "^epoch [34]/4" "$1" | sed 's/  [0-9.]* s .*//'; }
check "resumed epochs 3-4 equal the uninterrupted run" test -n "$(strip "$tmp/full.log")" -a "$(strip "$tmp/full.log")" = "$(strip "$tmp/resumed.log")"
check "resumed final test_acc equals" test "$(value test_acc "$tmp/full.log")" = "$(value test_acc "$tmp/resumed.log")"
"$VIT" --data "$tmp/toy" --out "$tmp/other" $SMALL --dim 16 --epochs 1 --resume "$tmp/part" >"$tmp/mismatch.log" 2>&1
rc=$?
check "resume with another model shape: exit 2" test "$rc" = 2
check "resume with another model shape: says so" grep -q "is for a model with" "$tmp/mismatch.log"

# --- 4. bad input: exit 2, one line, no crash -----------------------------------
expect2() { # expect2 DESCRIPTION ARGS...
    local what=$1; shift
    "$VIT" "$@" >"$tmp/e.log" 2>&1; local rc=$?
    if [ "$rc" = 2 ] && grep -q "^vit: " "$tmp/e.log"; then ok "$what"
    else bad "$what (exit $rc)"; sed 's/^/      /' "$tmp/e.log" | head -5; fi
}
expect2 "unknown flag" --bogus 1
expect2 "missing value" --epochs
expect2 "non-number" --epochs x
expect2 "patch does not divide size" --data "$tmp/toy" --size 16 --patch 5
expect2 "heads do not divide dim" --data "$tmp/toy" --dim 30 --heads 4
expect2 "missing data folder" --data "$tmp/nowhere" --out "$tmp/x"
mkdir -p "$tmp/one/train/only" "$tmp/one/test/only"
cp "$tmp/toy/train/vertical/0000.png" "$tmp/one/train/only/"
expect2 "one class folder" --data "$tmp/one" --out "$tmp/x"
mkdir -p "$tmp/junk/train/a" "$tmp/junk/train/b" "$tmp/junk/test/a"
echo x >"$tmp/junk/train/a/1.png"; : >"$tmp/junk/train/b/2.jpg"
expect2 "no readable image at all" --data "$tmp/junk" --out "$tmp/x"
cp -r "$tmp/toy" "$tmp/extra"; mkdir "$tmp/extra/test/diagonal"
expect2 "test class missing from train" --data "$tmp/extra" --out "$tmp/x" $SMALL --epochs 1
"$VIT" --help >"$tmp/help.log" 2>&1
check "--help exits 0 and lists --data" grep -q -- "--data DIR" "$tmp/help.log"
"$TOOL" --src "$tmp/nowhere" "$tmp/x" >"$tmp/t.log" 2>&1; rc=$?
check "fashion_mnist_png: missing IDX files give exit 2" test "$rc" = 2
echo "not gzip" >"$tmp/train-images-idx3-ubyte.gz"; cp "$tmp/train-images-idx3-ubyte.gz" "$tmp/train-labels-idx1-ubyte.gz"
"$TOOL" --src "$tmp" "$tmp/x" >"$tmp/t.log" 2>&1; rc=$?
check "fashion_mnist_png: corrupt .gz gives exit 2" test "$rc" = 2

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
