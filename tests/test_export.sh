#!/usr/bin/env bash
# tests/test_export.sh - tools/export_hf: a model trained here, out to
# transformers' layout (config.json + model.safetensors), checked by a
# NumPy float64 forward of the exported files (tests/export_ref.py, the
# safetensors package) against the kit's own logits (--dump-logits):
#   GPT-2 (Conv1D matrices, tied wte), a Llama of the kit's preset (untied
#   head), a Hugging Face Llama with a tied head and llama3 RoPE scaling
#   trained 5 steps, and one whose vocabulary of 300 is padded to 384 here
#   (the export unpads it); each export loads back into the kit (--init DIR)
#   (--init DIR/model.safetensors: config.json is read beside it) with
#   bit-identical logits; a file that is not a model of the kit is
#   refused with one line. An export cut into Hugging Face's shards
#   (model.safetensors.index.json + 2 files) loads directly, bit-identical;
#   an index naming a missing shard is refused. tools/export_gguf: the two Llamas as GGUF in F32,
#   F16 and BF16, read back with the gguf package (tests/export_ref.py gguf):
#   every key and every tensor (bit for bit); dynamic RoPE refused (no GGUF
#   form). Skipped, with a line, without numpy + safetensors (the GGUF part
#   without the gguf package).
set -u
cd "$(dirname "$0")/.."
G=${GPT2:-examples/gpt2}
L=${LLAMA:-examples/llama}
X=${EXPORT_HF:-tools/export_hf}
XG=${EXPORT_GGUF:-tools/export_gguf}
pass=0
fail=0
ok() { pass=$((pass + 1)); echo "ok   - $1"; }
bad() { fail=$((fail + 1)); echo "FAIL - $1"; }
check() { if eval "$2"; then ok "$1"; else bad "$1"; fi; }
for p in "$G" "$L" "$X" "$XG"; do
    if [ ! -x "$p" ]; then echo "FAIL - $p is not built (./build.sh)"; echo "0 passed, 1 failed"; exit 1; fi
done
if ! python3 -c 'import numpy, safetensors' 2>/dev/null; then
    echo "skip - python3 with numpy and safetensors is not available"
    echo "0 passed, 0 failed"
    exit 0
fi
D=$(mktemp -d /tmp/test_export.XXXXXX)
[ -n "${KEEP:-}" ] || trap 'rm -rf "$D"' EXIT
head -c 30000 README.md > "$D/text.txt"
R="--data $D/text.txt --batch 3 --seq 37 --sample 0 --threads 1"

# one NAME PROGRAM ARGS...: 5 steps, export, NumPy forward of the export, load it back
one() {
    local name=$1 prog=$2; shift 2
    "$prog" "$@" $R --steps 5 --out "$D/$name" --dump-logits "$D/$name.logits" > "$D/$name.out" 2>&1
    check "$name: 5 training steps (exit 0)" "[ $? = 0 ]"
    "$X" "$D/$name/model.safetensors" "$D/${name}_hf" > "$D/$name.x" 2>&1
    check "$name: export_hf (exit 0): $(head -1 "$D/$name.x")" "[ $? = 0 ]"
    local r
    r=$(python3 tests/export_ref.py check "$D/${name}_hf" "$D/text.txt" "$D/$name.logits" 3 37)
    check "$name: the export's NumPy forward equals the kit's logits: $r" "echo '$r' | grep -q '^ok'"
    "$prog" --init "$D/${name}_hf/model.safetensors" $R --steps 0 --out "$D/${name}_back" --dump-logits "$D/$name.back" > "$D/$name.b" 2>&1
    check "$name: the export loads back into the kit with bit-identical logits" "cmp -s '$D/$name.logits' '$D/$name.back'"
}
one gpt2 "$G" --model tiny
one llama "$L" --model tiny
python3 tests/llama_ref.py write "$D/hf_l3" --tied --rope llama3
one llama_tied_llama3 "$L" --init "$D/hf_l3"
check "llama_tied_llama3: exported tied (no lm_head.weight, tie_word_embeddings true) with its rope_scaling" \
    "grep -q '\"tie_word_embeddings\": true' '$D/llama_tied_llama3_hf/config.json' && grep -q llama3 '$D/llama_tied_llama3_hf/config.json' && ! grep -q lm_head '$D/llama_tied_llama3_hf/model.safetensors'"
python3 tests/llama_ref.py write "$D/hf_v300" --vocab 300
# a 300-token model reads token shards, not text: the bytes as a shard
"${MAKE_SHARD:-tools/make_shard}" -o "$D/text.bin" "$D/text.txt" > /dev/null
R="--data $D/text.bin --batch 3 --seq 37 --sample 0 --threads 1"
one llama_vocab300 "$L" --init "$D/hf_v300"
R="--data $D/text.txt --batch 3 --seq 37 --sample 0 --threads 1"
check "llama_vocab300: 384 rows here, 300 in the export" \
    "grep -q 'padded 384' '$D/llama_vocab300.out' && python3 -c \"from safetensors import safe_open; f = safe_open('$D/llama_vocab300_hf/model.safetensors', 'np'); import sys; sys.exit(f.get_slice('model.embed_tokens.weight').get_shape()[0] != 300)\""
"$X" "$D/text.txt" "$D/nothing" > /dev/null 2> "$D/bad.err"
rc=$?
check "a file that is not a model: exit 2, one line ($(head -1 "$D/bad.err"))" "[ $rc = 2 ] && [ \$(wc -l < '$D/bad.err') = 1 ]"

# --- Hugging Face's shards (model.safetensors.index.json) load directly -------------
# the untied llama's export cut into two files + the index, as transformers
# saves a large model (Python's standard library)
split() { # split SRC_DIR DST_DIR
    python3 - "$1" "$2" <<'PY'
import json, os, struct, sys
src, dst = sys.argv[1:3]
os.makedirs(dst, exist_ok=True)
b = open(os.path.join(src, "model.safetensors"), "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
h.pop("__metadata__", None)
names = sorted(h)
wmap = {}
for part, group in enumerate((names[:len(names) // 2], names[len(names) // 2:])):
    fname = "model-%05d-of-00002.safetensors" % (part + 1)
    hdr, off, blobs = {"__metadata__": {"format": "pt"}}, 0, []
    for k in group:
        v = h[k]
        blob = b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]]
        hdr[k] = {"dtype": v["dtype"], "shape": v["shape"], "data_offsets": [off, off + len(blob)]}
        off += len(blob)
        blobs.append(blob)
        wmap[k] = fname
    j = json.dumps(hdr).encode()
    j += b" " * (-len(j) % 8)
    open(os.path.join(dst, fname), "wb").write(struct.pack("<Q", len(j)) + j + b"".join(blobs))
json.dump({"metadata": {"total_size": len(b)}, "weight_map": wmap}, open(os.path.join(dst, "model.safetensors.index.json"), "w"))
PY
    cp "$1/config.json" "$2/"
}
split "$D/llama_hf" "$D/sharded"
"$L" --init "$D/sharded" $R --steps 0 --out "$D/sh_out" --dump-logits "$D/sharded.logits" > "$D/sh.out" 2>&1
check "sharded HF checkpoint (2 files + index.json): loads directly, bit-identical logits" "cmp -s '$D/llama.logits' '$D/sharded.logits'"
sed 's/model-00002-of-00002/model-00003-of-00002/' "$D/sharded/model.safetensors.index.json" > "$D/idx" && mv "$D/idx" "$D/sharded/model.safetensors.index.json"
"$L" --init "$D/sharded" $R --steps 0 --out "$D/sh_out" > /dev/null 2> "$D/bad.err"
rc=$?
check "sharded: an index naming a missing shard: exit 2, one line ($(head -1 "$D/bad.err"))" "[ $rc = 2 ] && [ \$(wc -l < '$D/bad.err') = 1 ] && grep -q 00003 '$D/bad.err'"

# --- GGUF ------------------------------------------------------------------------
if python3 -c 'import gguf' 2>/dev/null; then
    for m in llama llama_tied_llama3; do
        for t in f32 f16 bf16; do
            "$XG" --type $t "$D/$m/model.safetensors" "$D/$m.$t.gguf" > "$D/gg.out" 2>&1
            check "$m: export_gguf --type $t (exit 0): $(head -1 "$D/gg.out")" "[ $? = 0 ]"
            python3 tests/export_ref.py gguf "$D/$m/model.safetensors" "$D/$m.$t.gguf" $t > "$D/gg.ref" 2>&1
            rc=$?
            check "$m: the GGUF file ($t) read back by the gguf package: $(tr '\n' ' ' < "$D/gg.ref")" "[ $rc = 0 ]"
        done
    done
    python3 tests/llama_ref.py write "$D/hf_dyn" --rope dynamic
    "$L" --init "$D/hf_dyn" $R --steps 0 --out "$D/dyn" > /dev/null 2>&1
    "$XG" "$D/dyn/model.safetensors" "$D/dyn.gguf" > /dev/null 2> "$D/bad.err"
    rc=$?
    check "export_gguf: dynamic RoPE refused, one line ($(head -1 "$D/bad.err"))" "[ $rc = 2 ] && [ \$(wc -l < '$D/bad.err') = 1 ] && [ ! -e '$D/dyn.gguf' ]"
else
    echo "skip - GGUF read-back: the gguf package is not installed (pip install gguf)"
fi

echo "$pass passed, $fail failed"
[ $fail = 0 ]
