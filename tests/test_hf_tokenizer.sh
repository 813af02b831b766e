#!/usr/bin/env bash
# tests/test_hf_tokenizer.sh - the kit's tokenizer.json reader
# (extras/train_data.h, trn_tokenizer_load_hf) gives the same ids as
# Hugging Face's `tokenizers` package, on >= 1 MB of held-out text.
#   1. tests/hf_tokenizer_ref.py trains byte-level BPEs (GPT-2's
#      pre-tokenizer; Llama 3's split regex) and a byte-fallback "▁"
#      metaspace BPE (Llama 2 style) with the package on the repository's
#      own text plus generated Unicode, derives Qwen2-, SmolLM-, Mistral-
#      and Metaspace-split-style files from them (and a Llama 3 one with
#      whole words that only ignore_merges finds), and writes held-out
#      documents (CJK, emoji, accents, combining marks, whitespace and
#      digit runs, contractions, added tokens) with the package's ids and
#      decodes;
#   2. tests/hf_tokenizer_check.c requires identical ids document by
#      document, identical decodes, and exact round trips where the
#      tokenizer promises one;
#   3. and one-line refusals of a Unigram and a WordPiece model, the NFC
#      normalizer, an unknown split regex, an added token with lstrip and
#      a truncated file.
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
if [ ! -x "$check" ] || [ "$check" -ot tests/hf_tokenizer_check.c ] || [ "$check" -ot extras/train_data.h ]; then
    check=$tmp/hf_tokenizer_check
    ${CC:-cc} -O2 -std=c99 -D_POSIX_C_SOURCE=200809L -I. -o "$check" tests/hf_tokenizer_check.c -lm || {
        echo "FAIL: cannot build tests/hf_tokenizer_check.c"; echo "0 passed, 1 failed"; exit 1; }
fi
if ! python3 tests/hf_tokenizer_ref.py "$tmp"; then
    echo "FAIL: tests/hf_tokenizer_ref.py"; echo "0 passed, 1 failed"; exit 1
fi
"$check" "$tmp" gpt2 llama3 llama3words llama2 qwen2 smollm mistral metasplit \
    '!unigram=model type "Unigram" is not implemented' '!wordpiece=model type "WordPiece" is not implemented' \
    '!nfc=normalizer "NFC" is not implemented' '!pattern=split pattern "\p{L}+|\s+" is not one of the known' \
    '!lstrip=lstrip: true is not implemented' '!truncated=bad JSON'

