#!/usr/bin/env python3
"""tests/export_ref.py - for tests/test_export.sh: a NumPy float64 forward
of a model in Hugging Face's layout (a tools/export_hf directory), compared
with the logits examples/gpt2 or examples/llama wrote with --dump-logits.

  export_ref.py check DIR TEXT LOGITS B T
      DIR/config.json + DIR/model.safetensors (read with the safetensors
      package): Llama (tests/llama_ref.py's forward: RMSNorm, rotate-half
      RoPE with the config's scaling, grouped-query attention, SwiGLU) or
      GPT-2 (written here: LayerNorm eps 1e-5, Conv1D (in,out) matrices,
      tanh-GELU, learned positions, the head tied to wte); validation batch
      0 of TEXT as the kit's loader cuts it; max |kit - numpy| <= 1e-5 x
      max(1, largest |logit|). Prints "ok ..." or "FAIL ..."; exit 1 on FAIL.
"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama_ref  # noqa: E402


def layernorm(x, w, b):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + 1e-5) * w + b


def gpt2_forward(c, w, ids):
    C, NH, T = c["n_embd"], c["n_head"], len(ids)
    hs = C // NH
    x = w["wte.weight"][ids] + w["wpe.weight"][:T]
    mask = np.triu(np.full((T, T), -np.inf), 1)
    for l in range(c["n_layer"]):
        p = "h.%d." % l
        h = layernorm(x, w[p + "ln_1.weight"], w[p + "ln_1.bias"])
        qkv = h @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"]  # Conv1D: x @ W, W (in,out)
        q, k, v = (qkv[:, i * C:(i + 1) * C].reshape(T, NH, hs) for i in range(3))
        out = np.zeros((T, NH, hs))
        for hd in range(NH):
            s = q[:, hd] @ k[:, hd].T / np.sqrt(hs) + mask
            s = np.exp(s - s.max(-1, keepdims=True))
            out[:, hd] = (s / s.sum(-1, keepdims=True)) @ v[:, hd]
        x = x + out.reshape(T, C) @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
        h = layernorm(x, w[p + "ln_2.weight"], w[p + "ln_2.bias"])
        f = h @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"]
        f = 0.5 * f * (1 + np.tanh(np.sqrt(2 / np.pi) * (f + 0.044715 * f ** 3)))
        x = x + f @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"]
    x = layernorm(x, w["ln_f.weight"], w["ln_f.bias"])
    return x @ w["wte.weight"].T


def check(d, text, logits, B, T):
    from safetensors import safe_open
    c = json.load(open(os.path.join(d, "config.json")))
    w = {}
    with safe_open(os.path.join(d, "model.safetensors"), "np") as f:
        meta = f.metadata() or {}
        for k in f.keys():
            w[k] = f.get_tensor(k).astype(np.float64)
    if meta.get("format") != "pt":
        print("FAIL the safetensors metadata has no format 'pt' (transformers refuses such files)")
        return 1
    fwd = gpt2_forward if c["model_type"] == "gpt2" else llama_ref.forward
    data = np.frombuffer(open(text, "rb").read(), np.uint8).astype(np.int64)
    n_val = int(len(data) * float(np.float32(0.1)))
    n_train = len(data) - n_val
    V = c["vocab_size"]
    got = np.fromfile(logits, np.float32)
    Vp = got.size // (B * T)
    got = got.reshape(B, T, Vp)[:, :, :V].astype(np.float64)  # the kit's padded columns dropped
    worst, scale = 0.0, 0.0
    for b in range(B):
        ids = data[n_train + b * T:n_train + b * T + T]
        ref = fwd(c, w, ids)
        worst = max(worst, np.abs(ref - got[b]).max())
        scale = max(scale, np.abs(ref).max())
    tol = 1e-5 * max(1.0, scale)
    tag = "%s (%s, %d tensors): max |kit - numpy| = %.3g over %dx%dx%d logits (largest |logit| %.3g, tol %.2g)" % (
        os.path.basename(d.rstrip("/")), c["architectures"][0], len(w), worst, B, T, V, scale, tol)
    print(("ok   " if worst <= tol else "FAIL ") + tag)
    return 0 if worst <= tol else 1


if __name__ == "__main__":
    if len(sys.argv) == 7 and sys.argv[1] == "check":
        sys.exit(check(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), int(sys.argv[6])))
    print(__doc__)
    sys.exit(2)
