#!/usr/bin/env bash
# tests/test_safetensors_py.sh - train.h's safetensors files and Python's
# `safetensors` package understand each other, in both directions:
#   1. Python reads a weights file the kit wrote (tests/bin/test_checkpoint
#      --write-py) and checks every value bit for bit, the shapes, and the
#      metadata; it also recomputes the kit's trn.crc32c from the format's
#      definition (an independent CRC-32C written in Python).
#   2. Python reads a training checkpoint (tests/bin/test_resume): weights,
#      optim.m, optim.v and the metadata, and checks its trn.crc32c too.
#   3. Python writes F32, F16 (all 65536 values), I64, scalar and empty
#      tensors with metadata; the kit reads them (test_checkpoint --read-py).
# Needs python3 with numpy and safetensors (.ci/run installs them): without
# them this test FAILS, it does not skip.
set -u
cd "$(dirname "$0")/.."
pass=0; fail=0
ok()  { pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }
finish() { echo "$pass passed, $fail failed"; [ "$fail" = 0 ]; exit $?; }
count() { # count LOGFILE: add the "ok"/"FAIL" lines Python printed
    local p f
    p=$(grep -c '^ok ' "$1"); f=$(grep -c '^FAIL' "$1")
    pass=$((pass + p)); fail=$((fail + f))
    grep '^FAIL' "$1"
}

for b in tests/bin/test_checkpoint tests/bin/test_resume; do
    [ -x "$b" ] || { bad "$b is missing (run ./build.sh)"; finish; }
done
if ! python3 -c 'import numpy, safetensors' 2>/dev/null; then
    bad "python3 with numpy and safetensors is required: python3 -m pip install numpy safetensors"
    finish
fi
tmp=$(mktemp -d /tmp/trn_st_py.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

# the checks shared by both reads: CRC-32C from scratch, over the header's
# content (sorted metadata without trn.crc32c; tensors in data order) and
# the data, as train.h's >>checkpoint section defines trn.crc32c
cat > "$tmp/trncrc.py" <<'EOF'
import json, struct

def _table():
    t = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ (0x82F63B78 if c & 1 else 0)
        t.append(c)
    return t
TABLE = _table()

def crc32c(data, crc=0):
    crc ^= 0xFFFFFFFF
    for b in data:
        crc = TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF

def trn_crc(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__", {}) or {}
    crc = 0
    for k in sorted(meta):
        if k != "trn.crc32c":
            crc = crc32c(k.encode() + b"\0" + meta[k].encode() + b"\0", crc)
    for name, t in sorted(header.items(), key=lambda kv: (kv[1]["data_offsets"], kv[0])):
        b, e = t["data_offsets"]
        crc = crc32c(name.encode() + b"\0" + t["dtype"].encode() + b"\0", crc)
        crc = crc32c(struct.pack("<%dQ" % (3 + len(t["shape"])), len(t["shape"]), b, e, *t["shape"]), crc)
    crc = crc32c(raw[8 + n:], crc)
    return "%08x" % crc, meta.get("trn.crc32c")

def check(cond, what):
    print(("ok " if cond else "FAIL ") + what)
EOF

# 1. a weights file written by the kit
if tests/bin/test_checkpoint --write-py "$tmp/kit.safetensors" > "$tmp/w.log" 2>&1; then ok
else bad "test_checkpoint --write-py: $(cat "$tmp/w.log")"; finish; fi
PYTHONPATH="$tmp" python3 - "$tmp/kit.safetensors" > "$tmp/p1.log" 2>&1 <<'EOF'
import sys, numpy as np
from safetensors import safe_open
from safetensors.numpy import load_file
from trncrc import check, trn_crc
path = sys.argv[1]
t = load_file(path)
check(sorted(t) == ["a", "b.weight", "big"], "names %s" % sorted(t))
check(t["a"].dtype == np.float32 and t["a"].shape == (2, 3), "a is float32 (2,3)")
check(np.array_equal(t["a"], (np.arange(6, dtype=np.float32) * 0.5 - 1).reshape(2, 3)), "a values")
want = np.array([0x80000000, 0x00000001, 0x7F7FFFFF, np.float32(-1e-3).view(np.uint32)], dtype=np.uint32)
check(np.array_equal(t["b.weight"].view(np.uint32), want), "b.weight bits: -0, denormal, max, -1e-3")
big = np.arange(300000, dtype=np.float32) * np.float32(0.25) - np.float32(7)
check(t["big"].shape == (300000,) and np.array_equal(t["big"], big), "big: 300000 values exact")
with safe_open(path, "np") as f:
    m = f.metadata()
check(m.get("config") == '{"n_layer": 2, "name": "tiny"}', "metadata config")
check(m.get("unicode") == "h\u00e9llo \u2713", "metadata unicode")
check(m.get("quote") == 'a"b\\c\nd', "metadata with quote, backslash, newline")
check(m.get("format") == "pt", "format = pt")
computed, stored = trn_crc(path)
check(computed == stored, "trn.crc32c recomputed in Python: %s vs stored %s" % (computed, stored))
EOF
[ $? = 0 ] || bad "python read of the kit's weights file crashed: $(tail -3 "$tmp/p1.log")"
count "$tmp/p1.log"

# 2. a training checkpoint written by the kit
if tests/bin/test_resume --dir "$tmp/run" --steps 6 --every 3 > "$tmp/r.log" 2>&1; then ok
else bad "test_resume: $(tail -3 "$tmp/r.log")"; finish; fi
PYTHONPATH="$tmp" python3 - "$tmp/run/ckpt_00000006.safetensors" "$tmp/run/final.safetensors" > "$tmp/p2.log" 2>&1 <<'EOF'
import sys, numpy as np
from safetensors import safe_open
from safetensors.numpy import load_file
from trncrc import check, trn_crc
ck, final = sys.argv[1], sys.argv[2]
t = load_file(ck)
params = ["fc1.bias", "fc1.weight", "fc2.bias", "fc2.weight", "out.bias", "out.weight"]
check(sorted(t) == sorted(params + ["optim.m", "optim.v"]), "checkpoint names %s" % sorted(t))
n = sum(t[p].size for p in params)
check(t["optim.m"].shape == (n,) and t["optim.v"].shape == (n,), "moments cover all %d parameters" % n)
check(bool((t["optim.v"] >= 0).all()) and bool((t["optim.v"] > 0).any()), "v is >= 0 and not all zero")
with safe_open(ck, "np") as f:
    m = f.metadata()
check(m.get("step") == "6" and m.get("trn.optim.step") == "6", "step 6 in metadata")
check(m.get("trn.kind") == "checkpoint", "trn.kind = checkpoint")
check(all(k in m for k in ("loader.pos", "noise.rng", "trn.optim.lr", "trn.optim.beta2")), "loader, rng, hyperparameters")
w = load_file(final)
check(all(np.array_equal(w[p], t[p]) for p in params), "final weights == step-6 checkpoint's weights")
for p in (ck, final):
    computed, stored = trn_crc(p)
    check(computed == stored, "trn.crc32c of %s recomputed: %s vs %s" % (p.split("/")[-1], computed, stored))
EOF
[ $? = 0 ] || bad "python read of the kit's checkpoint crashed: $(tail -3 "$tmp/p2.log")"
count "$tmp/p2.log"

# 3. Python writes, the kit reads
if python3 - "$tmp/py.safetensors" > "$tmp/p3.log" 2>&1 <<'EOF'
import sys, numpy as np
from safetensors.numpy import save_file
half = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16)
with np.errstate(all="ignore"):
    save_file({
        "f32": (np.arange(12, dtype=np.float32) * 0.5 - 2).reshape(3, 4),
        "f16_all": half,
        "f16_as_f32": half.astype(np.float32),
        "i64": np.array([1, -2, 3], dtype=np.int64),
        "scalar": np.array(7.25, dtype=np.float32),
        "empty": np.zeros((0, 4), dtype=np.float32),
    }, sys.argv[1], metadata={"hello": "world", "\u00fc": "\u2713"})
EOF
then ok; else bad "python save_file: $(tail -3 "$tmp/p3.log")"; fi
tests/bin/test_checkpoint --read-py "$tmp/py.safetensors" > "$tmp/k3.log" 2>&1
line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$tmp/k3.log" | tail -1)
if [ -n "$line" ]; then
    pass=$((pass + ${line%% passed*})); f=${line#*, }; fail=$((fail + ${f%% failed}))
    grep '^FAIL' "$tmp/k3.log"
else
    bad "test_checkpoint --read-py: $(tail -3 "$tmp/k3.log")"
fi
finish
