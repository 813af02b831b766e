#!/usr/bin/env bash
# tests/test_make_shard.sh - tools/make_shard end to end: text -> shard ->
# text is the identity (byte-level), in llm.c's uint16 format and, with
# --bits 32, its uint32 one; bad input gives exit code 2 with one line on
# stderr. (BPE itself is tested in tests/test_data.c.)
set -u
cd "$(dirname "$0")/.."
tool=./tools/make_shard
pass=0; fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
[ -x "$tool" ] || { echo "FAIL: $tool is not built"; echo "0 passed, 1 failed"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# round trip of two files, including bytes that are not text
printf 'hello\nworld \xff\x00 end' > "$tmp/a.txt"
cp README.md "$tmp/b.txt" 2>/dev/null || printf 'second file\n' > "$tmp/b.txt"
if $tool -o "$tmp/s.bin" "$tmp/a.txt" "$tmp/b.txt" > "$tmp/out" 2>&1; then ok; else bad "make_shard failed: $(cat "$tmp/out")"; fi
size=$(($(wc -c < "$tmp/a.txt") + $(wc -c < "$tmp/b.txt")))
[ "$(wc -c < "$tmp/s.bin")" -eq $((1024 + 2 * size)) ] && ok || bad "shard size is not 1024 + 2*bytes"
# magic 20240520 = 0x0134D888, little endian
[ "$(head -c 4 "$tmp/s.bin" | od -An -tx1 | tr -d ' \n')" = "88d83401" ] && ok || bad "shard magic bytes"
$tool --decode "$tmp/s.bin" > "$tmp/back" && cat "$tmp/a.txt" "$tmp/b.txt" | cmp -s - "$tmp/back" && ok \
    || bad "decode is not the input"
grep -q "uint16 ids (llm.c's GPT-2 format: magic 20240520, version 1)" "$tmp/out" && ok || bad "says it wrote uint16 ids"

# uint32 ids (llm.c's Llama 3 format, magic 20240801 = 0x0134D9A1, version 7):
# asked for with --bits 32 here (byte ids fit 16 bits; a vocabulary over
# 65,536 gets it by itself), decoded back to the same text
if $tool --bits 32 -o "$tmp/s32.bin" "$tmp/a.txt" "$tmp/b.txt" > "$tmp/out32" 2>&1; then ok; else bad "--bits 32: $(cat "$tmp/out32")"; fi
[ "$(wc -c < "$tmp/s32.bin")" -eq $((1024 + 4 * size)) ] && ok || bad "uint32 shard size is not 1024 + 4*bytes"
[ "$(head -c 8 "$tmp/s32.bin" | od -An -tx1 | tr -d ' \n')" = "a1d9340107000000" ] && ok || bad "uint32 shard magic/version bytes"
grep -q "uint32 ids (llm.c's Llama 3 format: magic 20240801, version 7)" "$tmp/out32" && ok || bad "says it wrote uint32 ids"
$tool --decode "$tmp/s32.bin" > "$tmp/back32" && cat "$tmp/a.txt" "$tmp/b.txt" | cmp -s - "$tmp/back32" && ok \
    || bad "decode of the uint32 shard is not the input"
# a uint32 shard holding id 70000 (0x00011170): beyond the byte vocabulary
{ printf '\xa1\xd9\x34\x01\x07\x00\x00\x00\x01\x00\x00\x00'; head -c 1012 /dev/zero; printf '\x70\x11\x01\x00'; } > "$tmp/big.bin"
head -c 2000 "$tmp/s32.bin" > "$tmp/trunc32.bin"

# bad input: exit 2 and a one-line reason
expect2() { # expect2 WHAT ARGS...
    local what=$1; shift
    $tool "$@" > "$tmp/o" 2> "$tmp/e"; local rc=$?
    if [ "$rc" = 2 ] && [ "$(wc -l < "$tmp/e")" = 1 ]; then ok; else bad "$what: exit $rc, stderr: $(cat "$tmp/e")"; fi
}
: > "$tmp/empty.txt"
head -c 1500 "$tmp/s.bin" > "$tmp/trunc.bin"
expect2 "no arguments"
expect2 "unknown flag" --bogus
expect2 "missing value" -o
expect2 "missing input" -o "$tmp/x.bin" "$tmp/nope.txt"
expect2 "empty input" -o "$tmp/x.bin" "$tmp/empty.txt"
expect2 "--eot with bytes" --eot -o "$tmp/x.bin" "$tmp/a.txt"
expect2 "missing bpe dir" --bpe-dir "$tmp/nodir" -o "$tmp/x.bin" "$tmp/a.txt"
expect2 "decode text" --decode "$tmp/a.txt"
expect2 "decode truncated" --decode "$tmp/trunc.bin"
expect2 "decode truncated uint32" --decode "$tmp/trunc32.bin"
expect2 "decode id 70000 with the byte vocabulary" --decode "$tmp/big.bin"
expect2 "--bits 8" --bits 8 -o "$tmp/x.bin" "$tmp/a.txt"
expect2 "--bits with --decode" --bits 32 --decode "$tmp/s32.bin"
expect2 "unwritable output" -o "$tmp/nodir/x.bin" "$tmp/a.txt"
[ ! -e "$tmp/x.bin" ] && ok || bad "a failed run left an output file"
$tool --help > "$tmp/o" 2>&1 && grep -q usage "$tmp/o" && ok || bad "--help"

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
