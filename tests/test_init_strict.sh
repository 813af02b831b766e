#!/usr/bin/env bash
# tests/test_init_strict.sh - --init is strict (issue 24, items 1, 6, 7, 8):
#   1. a GPT-2 file whose wte is zero columns wide: a one-line refusal, not a
#      SIGFPE (the head count became 0 and was divided by)
#   6. NaN or inf in any --init tensor (gpt2: safetensors and llm.c .bin;
#      llama): exit 2 naming the tensor, not a run that trains on NaN
#   8. a tensor the model has no use for (a q_proj.bias, a layer past the
#      model's, a gap in the layer numbers h.0, h.2): exit 2 naming it,
#      not a model that silently differs from the file
#   7. config.json is read as strict JSON: not JSON, malformed, 4294967298
#      layers, a hidden size of 32.7, 1e9 heads, an eps of NaN, a key that
#      sits only inside another object, a boolean that is a string: each
#      exit 2 naming config.json (and the key); for GPT-2 a broken
#      config.json beside the weights is an error, not "no config.json"
#   --init-lenient loads the NaN and the extra tensors anyway (exit 0).
# The files are the kit's own (--steps 0 of the tiny presets, and their
# tools/export_hf directories), edited by a few lines of Python's standard
# library or sed (no numpy needed).
set -u
cd "$(dirname "$0")/.."
G=${GPT2:-examples/gpt2}
L=${LLAMA:-examples/llama}
pass=0
fail=0
ok() { pass=$((pass + 1)); echo "ok   - $1"; }
bad() { fail=$((fail + 1)); echo "FAIL - $1"; }
check() { if eval "$2"; then ok "$1"; else bad "$1"; fi; }
X=${EXPORT_HF:-tools/export_hf}
for p in "$G" "$L" "$X"; do
    if [ ! -x "$p" ]; then echo "FAIL - $p is not built (./build.sh)"; echo "0 passed, 1 failed"; exit 1; fi
done
if ! command -v python3 > /dev/null; then echo "skip - python3 is not available"; echo "0 passed, 0 failed"; exit 0; fi
D=$(mktemp -d /tmp/test_init_strict.XXXXXX)
[ -n "${KEEP:-}" ] || trap 'rm -rf "$D"' EXIT
head -c 20000 README.md > "$D/text.txt"

# edit IN OUT OP [ARGS]: a copy of safetensors file IN with one change (the
# checksum dropped from the metadata: the change is the point)
edit() {
    python3 - "$@" <<'PY'
import json, struct, sys
src, dst, op = sys.argv[1:4]
arg = sys.argv[4:]
b = open(src, "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
meta = h.pop("__metadata__", {})
meta = {k: v for k, v in meta.items() if not k.startswith("trn.")}  # its checksum and the mark that asks for it
data = {k: bytearray(b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]]) for k, v in h.items()}
shape = {k: v["shape"] for k, v in h.items()}
if op in ("nan", "inf"):  # one value of tensor arg[0], in its middle
    i = len(data[arg[0]]) // 8 * 4
    data[arg[0]][i:i + 4] = struct.pack("<f", float(op))
elif op == "add":  # a tensor of zeros: add NAME DIM...
    shape[arg[0]] = [int(x) for x in arg[1:]]
    data[arg[0]] = bytearray(4 * eval("*".join(arg[1:]) or "1"))
elif op == "rename":  # every name starting with arg[0] gets arg[1] instead
    for k in [k for k in data if k.startswith(arg[0])]:
        data[arg[1] + k[len(arg[0]):]] = data.pop(k)
        shape[arg[1] + k[len(arg[0]):]] = shape.pop(k)
elif op == "zerowidth":  # every tensor's last dimension 0, no metadata (as Hugging Face's files)
    meta = {}
    for k in data:
        shape[k] = shape[k][:-1] + [0]
        data[k] = bytearray()
hdr, off = {"__metadata__": meta} if meta else {}, 0
for k in sorted(data):
    hdr[k] = {"dtype": "F32", "shape": shape[k], "data_offsets": [off, off + len(data[k])]}
    off += len(data[k])
j = json.dumps(hdr).encode()
j += b" " * (-len(j) % 8)
open(dst, "wb").write(struct.pack("<Q", len(j)) + j + b"".join(bytes(data[k]) for k in sorted(data)))
PY
}
# run NAME EXPECT PROGRAM ARGS...: EXPECT 2 (a one-line refusal whose line
# contains $WANT) or 0
run() {
    local name=$1 want=$2; shift 2
    "$@" --steps 0 --sample 0 --data "$D/text.txt" --threads 1 --out "$D/o" > "$D/out" 2> "$D/err"
    local rc=$?
    if [ "$want" = 0 ]; then
        check "$name: exit 0 (got $rc)" "[ $rc = 0 ]"
    else
        check "$name: exit 2 with one line naming $WANT (got $rc: $(head -c 200 "$D/err" | head -1))" \
            "[ $rc = 2 ] && [ \$(wc -l < '$D/err') = 1 ] && grep -q -- '$WANT' '$D/err'"
    fi
}

$G --model tiny --steps 0 --sample 0 --data "$D/text.txt" --out "$D/g" > /dev/null 2>&1
$L --model tiny --steps 0 --sample 0 --data "$D/text.txt" --out "$D/l" > /dev/null 2>&1
check "the two tiny models were written" "[ -s '$D/g/model.safetensors' ] && [ -s '$D/l/model.safetensors' ]"
edit "$D/g/model.safetensors" "$D/g_same.safetensors" add unused.weight 0 && rm -f "$D/g_same.safetensors"
edit "$D/g/model.safetensors" "$D/g_plain.safetensors" rename none none
edit "$D/l/model.safetensors" "$D/l_plain.safetensors" rename none none
WANT=x run "unedited copies load (gpt2)" 0 $G --init "$D/g_plain.safetensors"
WANT=x run "unedited copies load (llama)" 0 $L --init "$D/l_plain.safetensors"

# --- 1. zero-width wte ----------------------------------------------------------
edit "$D/g/model.safetensors" "$D/g_zero.safetensors" zerowidth
WANT=wte run "gpt2: wte zero columns wide (was SIGFPE, exit 136)" 2 $G --init "$D/g_zero.safetensors"

# --- 6. non-finite weights --------------------------------------------------------
edit "$D/g/model.safetensors" "$D/g_nan.safetensors" nan h.1.mlp.c_fc.weight
WANT=h.1.mlp.c_fc.weight run "gpt2: a NaN in h.1.mlp.c_fc.weight" 2 $G --init "$D/g_nan.safetensors"
edit "$D/l/model.safetensors" "$D/l_inf.safetensors" inf model.layers.0.mlp.up_proj.weight
WANT=model.layers.0.mlp.up_proj.weight run "llama: an inf in model.layers.0.mlp.up_proj.weight" 2 $L --init "$D/l_inf.safetensors"
edit "$D/l/model.safetensors" "$D/l_nan.safetensors" nan model.embed_tokens.weight
WANT=model.embed_tokens.weight run "llama: a NaN in the embedding" 2 $L --init "$D/l_nan.safetensors"
WANT=x run "llama: --init-lenient loads the NaN" 0 $L --init "$D/l_nan.safetensors" --init-lenient
# an llm.c file (version 3: 256 int32 header, then float32 in llm.c's order)
python3 - "$D/g.bin" <<'PY'
import struct, sys, random
maxT, V, L, NH, C, Vp = 16, 256, 1, 2, 8, 256
n = Vp * C + maxT * C + L * (C + C + 3 * C * C + 3 * C + C * C + C + C + C + 4 * C * C + 4 * C + 4 * C * C + C) + 2 * C
hdr = [20240326, 3, maxT, V, L, NH, C, Vp] + [0] * 248
r = random.Random(1)
vals = [r.uniform(-0.1, 0.1) for _ in range(n)]
vals[Vp * C + 5] = float("nan")  # in wpe
open(sys.argv[1], "wb").write(struct.pack("<256i", *hdr) + struct.pack("<%df" % n, *vals))
PY
WANT=wpe run "gpt2: a NaN in an llm.c file's wpe" 2 $G --init "$D/g.bin"

# --- 8. tensors the model does not have -------------------------------------------
edit "$D/l/model.safetensors" "$D/l_bias.safetensors" add model.layers.0.self_attn.q_proj.bias 32
WANT=q_proj.bias run "llama: an extra q_proj.bias" 2 $L --init "$D/l_bias.safetensors"
edit "$D/l/model.safetensors" "$D/l_layer.safetensors" add model.layers.2.mlp.up_proj.weight 64 32
WANT=model.layers.2 run "llama: a layer past the model's two" 2 $L --init "$D/l_layer.safetensors"
WANT=x run "llama: --init-lenient ignores the extra tensor" 0 $L --init "$D/l_layer.safetensors" --init-lenient
edit "$D/g/model.safetensors" "$D/g_gap.safetensors" rename h.1. h.2.
WANT=h.2. run "gpt2: layers h.0, h.2 (a gap: was read as 1 layer)" 2 $G --init "$D/g_gap.safetensors"
edit "$D/g/model.safetensors" "$D/g_extra.safetensors" add h.0.attn.c_attn.scale 96
WANT=h.0.attn.c_attn.scale run "gpt2: an extra tensor" 2 $G --init "$D/g_extra.safetensors"
edit "$D/g/model.safetensors" "$D/g_mask.safetensors" add h.0.attn.bias 1 1 4 4
WANT=x run "gpt2: Hugging Face's causal-mask buffer h.0.attn.bias is not a weight: loads" 0 $G --init "$D/g_mask.safetensors"

# --- 7. config.json, strictly -------------------------------------------------------
"$X" "$D/l/model.safetensors" "$D/lhf" > /dev/null && "$X" "$D/g/model.safetensors" "$D/ghf" > /dev/null
WANT=x run "llama: the exported directory loads" 0 $L --init "$D/lhf"
cfg() { # cfg NAME WANT SED-EXPRESSION: config.json edited, then --init
    local name=$1 want=$2
    mkdir -p "$D/c_$name" && ln -sf "$D/lhf/model.safetensors" "$D/c_$name/model.safetensors"
    sed "$3" "$D/lhf/config.json" > "$D/c_$name/config.json"
    WANT=$want run "llama config.json: $name" 2 $L --init "$D/c_$name"
}
cfg "not JSON at all" config.json 's/.*/hello/'
cfg "malformed (a trailing comma)" config.json 's/"torch_dtype": "float32"/"torch_dtype": "float32",/'
cfg "4294967298 layers" num_hidden_layers 's/"num_hidden_layers": 2/"num_hidden_layers": 4294967298/'
cfg "hidden size 32.7" hidden_size 's/"hidden_size": 32/"hidden_size": 32.7/'
cfg "1e9 heads" num_attention_heads 's/"num_attention_heads": 2/"num_attention_heads": 1e9/'
cfg "eps NaN" config.json 's/"rms_norm_eps": [0-9.e-]*/"rms_norm_eps": NaN/'
cfg "num_hidden_layers only inside another object" num_hidden_layers 's/"num_hidden_layers": 2/"text_config": {"num_hidden_layers": 2}/'
cfg "tie_word_embeddings as a string" tie_word_embeddings 's/"tie_word_embeddings": false/"tie_word_embeddings": "false"/'
cfg "a key given twice" hidden_size 's/"hidden_size": 32/"hidden_size": 32, "hidden_size": 64/'
cfg "rope_scaling of type yarn" yarn 's/"rope_scaling": null/"rope_scaling": {"rope_type": "yarn", "factor": 4.0}/'
sed 's/"n_head": [0-9]*/"n_head": 2,/' "$D/ghf/config.json" > "$D/ghf/bad.json" && mv "$D/ghf/bad.json" "$D/ghf/config.json"
WANT=config.json run "gpt2: a malformed config.json beside the weights (was: 'no config.json', a guessed head count)" 2 \
    $G --init "$D/ghf/model.safetensors"
rm "$D/ghf/config.json" && mkdir "$D/ghf/config.json"
WANT=config.json run "gpt2: a directory named config.json beside the weights" 2 $G --init "$D/ghf/model.safetensors"

echo "$pass passed, $fail failed"
[ $fail = 0 ]
