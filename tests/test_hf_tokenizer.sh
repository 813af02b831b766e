#!/usr/bin/env bash
# tests/test_hf_tokenizer.sh - the kit's tokenizer.json reader
# (extras/train_data.h, trn_tokenizer_load_hf) gives the same ids as
# Hugging Face's `tokenizers` package, on >= 1 MB of held-out text.
#   1. tests/hf_tokenizer_ref.py trains byte-level BPEs (GPT-2's
#      pre-tokenizer; Llama 3's split regex) and a byte-fallback "▁"
#      metaspace BPE (Llama 2 style) with the package on the repository's
#      own text plus generated Unicode, derives Qwen2-, SmolLM-, Mistral-
#      and Metaspace-split-style files from them (and a Llama 3 one with
#      whole words that only ignore_merges finds, and two with the NFC
#      normalizer: Qwen2's byte-level file with "NFC", Llama 2's with a
#      Sequence [NFC, Prepend, Replace]), and writes held-out documents
#      (CJK, emoji, accents, combining marks, whitespace and digit runs,
#      contractions, added tokens; decomposed and precomposed accents,
#      Hangul jamo, marks out of canonical order, singletons such as
#      U+212B, composition exclusions) with the package's ids and decodes,
#      and nfc.bin: every assigned code point with marks around it and
#      Python's unicodedata NFC of it;
#   2. tests/hf_tokenizer_check.c requires identical ids document by
#      document, identical decodes, and exact round trips where the
#      tokenizer promises one;
#      @nfc requires the kit's NFC (extras/train_data.h) to give Python's
#      output on every case of nfc.bin;
#      @classes the kit's character class (other, \s, \p{L}, \p{N}) of
#      every assigned code point to be the package's regex engine's;
#      @pieces the kit's GPT-2, Llama 3 and Qwen2 split scanners to cut
#      20,000 random strings of white space, marks, contractions... and the
#      fixed edge-case documents into the package's pieces;
#   3. and one-line refusals of a Unigram and a WordPiece model, the NFKC
#      normalizer, a Sequence holding Lowercase, an unknown split regex, an
#      added token with lstrip and a truncated file;
#   4. extras/train_unicode.h is the output of tools/gen_unicode_nfc.py
#      (where Python's unicodedata has the same Unicode version).
# Needs python3 with `tokenizers` (.ci/run installs it; no network here):
# without it the test prints SKIP.
set -u
cd "$(dirname "$0")/.."
if ! python3 -c 'import tokenizers' 2>/dev/null; then
    echo "SKIP: python3 cannot import tokenizers (python3 -m pip install tokenizers)"
    echo "0 passed, 0 failed"
    exit 0
fi
tmp=$(mktemp -d /tmp/trn_hf_tok.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
check=tests/bin/hf_tokenizer_check
if [ ! -x "$check" ] || [ "$check" -ot tests/hf_tokenizer_check.c ] || [ "$check" -ot extras/train_data.h ] ||
   [ "$check" -ot extras/train_unicode.h ]; then
    check=$tmp/hf_tokenizer_check
    ${CC:-cc} -O2 -std=c99 -D_POSIX_C_SOURCE=200809L -I. -o "$check" tests/hf_tokenizer_check.c -lm || {
        echo "FAIL: cannot build tests/hf_tokenizer_check.c"; echo "0 passed, 1 failed"; exit 1; }
fi
if ! python3 tests/hf_tokenizer_ref.py "$tmp"; then
    echo "FAIL: tests/hf_tokenizer_ref.py"; echo "0 passed, 1 failed"; exit 1
fi
log=$tmp/check.log
"$check" "$tmp" gpt2 llama3 llama3words llama2 qwen2 smollm mistral metasplit qwen2nfc llama2nfc @nfc @classes @pieces \
    '!unigram=model type "Unigram" is not implemented' '!wordpiece=model type "WordPiece" is not implemented' \
    '!nfkc=normalizer "NFKC" is not implemented' '!lowercase=normalizer "Lowercase" is not implemented' \
    '!pattern=split pattern "\p{L}+|\s+" is not one of the known' \
    '!lstrip=lstrip: true is not implemented' '!truncated=bad JSON' > "$log"
rc=$?
cat "$log"
pass=$(sed -n 's/^\([0-9]*\) passed, \([0-9]*\) failed$/\1/p' "$log"); pass=${pass:-0}
fail=$(sed -n 's/^\([0-9]*\) passed, \([0-9]*\) failed$/\2/p' "$log"); fail=${fail:-1}
[ "$rc" = 0 ] || [ "$fail" != 0 ] || fail=1
ok() { pass=$((pass + 1)); echo "ok $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1"; }
check() { if eval "$2"; then ok "$1"; else bad "$1"; fi; }

if [ "$(python3 -c 'import unicodedata; print(unicodedata.unidata_version)')" = \
     "$(sed -n 's/^#define TRN__UNICODE_VERSION "\(.*\)"$/\1/p' extras/train_unicode.h)" ]; then
    check "extras/train_unicode.h is tools/gen_unicode_nfc.py's output" \
        "python3 tools/gen_unicode_nfc.py --check extras/train_unicode.h"
else
    echo "note: python3's unicodedata is not extras/train_unicode.h's Unicode version: the table was not regenerated"
fi

# 5. the programs: examples/llama finds tokenizer.json beside --init and
#    counts the tokens of its text as tokenizer(text) does in Python (BOS
#    included); without one, text for a 2304-token model is a one-line
#    error; tools/make_shard --tokenizer writes the same count and decodes
#    back to the package's decode
L=${LLAMA:-examples/llama} M=${MAKE_SHARD:-tools/make_shard}
if [ -x "$L" ] && [ -x "$M" ] && python3 -c 'import numpy, safetensors' 2>/dev/null; then
    head -c 20000 README.md > "$tmp/text.txt"
    python3 tests/llama_ref.py write "$tmp/hf" --vocab 2304 > /dev/null
    cp "$tmp/llama2.json" "$tmp/hf/tokenizer.json"
    want=$(python3 -c "
from tokenizers import Tokenizer
t = Tokenizer.from_file('$tmp/llama2.json'); s = open('$tmp/text.txt', encoding='utf-8').read()
e = t.encode(s); print(len(e.ids), e.ids[0])")
    "$L" --init "$tmp/hf" --data "$tmp/text.txt" --steps 1 --batch 2 --seq 16 --eval-every 0 --sample 8 \
        --prompt "The kit" --threads 1 --out "$tmp/run" > "$tmp/run.out" 2>&1
    check "examples/llama: runs with tokenizer.json beside --init (exit $?)" \
        "grep -q 'tokenizer: $tmp/hf/tokenizer.json (beside --init)' '$tmp/run.out' && grep -q -- '---- sample' '$tmp/run.out'"
    check "examples/llama: the text is ${want% *} tokens, as tokenizer(text) gives (BOS ${want#* } first)" \
        "grep -q '^data: ${want% *} tokens' '$tmp/run.out'"
    rm "$tmp/hf/tokenizer.json"
    "$L" --init "$tmp/hf" --data "$tmp/text.txt" --steps 1 --batch 2 --seq 16 --threads 1 --out "$tmp/run2" > "$tmp/run2.out" 2>&1
    check "examples/llama: text for a 2304-token model without a tokenizer: exit 2, one line naming --tokenizer" \
        "[ $? = 2 ] && [ \$(wc -l < '$tmp/run2.out') = 1 ] && grep -q -- '--tokenizer FILE' '$tmp/run2.out'"
    "$M" --tokenizer "$tmp/llama2.json" --bos -o "$tmp/text.bin" "$tmp/text.txt" > "$tmp/ms.out" 2>&1
    check "make_shard --tokenizer --bos: ${want% *} tokens" "grep -q -- '-> ${want% *} tokens' '$tmp/ms.out'"
    "$M" --tokenizer "$tmp/llama2.json" --decode "$tmp/text.bin" > "$tmp/back.txt" 2>&1
    python3 -c "
from tokenizers import Tokenizer
t = Tokenizer.from_file('$tmp/llama2.json'); s = open('$tmp/text.txt', encoding='utf-8').read()
open('$tmp/want.txt', 'w', encoding='utf-8', newline='').write(t.decode(t.encode(s).ids, skip_special_tokens=False))"
    check "make_shard --decode: the package's decode byte for byte" "cmp -s '$tmp/back.txt' '$tmp/want.txt'"
else
    echo "note: examples/llama, tools/make_shard (./build.sh) or numpy+safetensors missing: the programs' checks did not run"
fi
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
