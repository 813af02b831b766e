#!/usr/bin/env python3
"""tests/llama_ref.py - a tiny random Llama in Hugging Face's layout, and a
NumPy reference of its forward pass, for tests/test_llama.sh.

  llama_ref.py write DIR [--tied] [--bf16]
      DIR/config.json + DIR/model.safetensors with HF's names
      (model.layers.0.self_attn.q_proj.weight, ...): 2 layers, 4 query heads,
      2 key/value heads (grouped-query), hidden 32, head_dim 8, SwiGLU 48,
      byte vocabulary 256, rope_theta 50000 and rms_norm_eps 1e-6 (not the
      kit's preset values, so the config is what is read). --tied: no
      lm_head (tie_word_embeddings). --bf16: weights stored as BF16.
  llama_ref.py check DIR TEXT LOGITS B T
      recompute, in float64, the logits of validation batch 0 of TEXT (the
      kit's loader: the last 10% of the bytes, rows of T) and compare them
      with the float32 file LOGITS written by examples/llama --dump-logits.

The reference follows Hugging Face's LlamaForCausalLM (modeling_llama.py):
RMSNorm x * rsqrt(mean(x^2) + eps) * w; RoPE with inv_freq = theta^(-2i/d)
and rotate_half (the two halves of each head, not neighbour pairs); query
head h reads key/value head h // (NH/NKV) (repeat_kv); causal softmax with
scale 1/sqrt(head_dim); MLP down(silu(gate(x)) * up(x)); final norm; head.
Prints "ok ..." or "FAIL ..." lines; exits 1 on failure.
"""
import json
import os
import sys

import numpy as np

CFG = dict(hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
           num_key_value_heads=2, head_dim=8, vocab_size=256, max_position_embeddings=128,
           rms_norm_eps=1e-6, rope_theta=50000.0, hidden_act="silu", rope_scaling=None,
           attention_bias=False, mlp_bias=False, tie_word_embeddings=False,
           architectures=["LlamaForCausalLM"], model_type="llama", torch_dtype="float32")


def to_bf16(a):
    """float32 -> bfloat16 bits (round to nearest even), as uint16"""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype(np.uint16)


def from_bf16(b):
    return (b.astype(np.uint32) << 16).view(np.float32)


def write(d, tied, bf16):
    from safetensors.numpy import save_file
    os.makedirs(d, exist_ok=True)
    c = dict(CFG, tie_word_embeddings=tied, torch_dtype="bfloat16" if bf16 else "float32")
    rng = np.random.default_rng(7)
    C, F, hs = c["hidden_size"], c["intermediate_size"], c["head_dim"]
    NH, NKV, V = c["num_attention_heads"], c["num_key_value_heads"], c["vocab_size"]
    w = {"model.embed_tokens.weight": rng.normal(0, 1.0, (V, C)), "model.norm.weight": rng.uniform(0.5, 1.5, C)}
    if not tied:
        w["lm_head.weight"] = rng.normal(0, 0.3, (V, C))
    for l in range(c["num_hidden_layers"]):
        p = "model.layers.%d." % l
        w[p + "input_layernorm.weight"] = rng.uniform(0.5, 1.5, C)
        w[p + "post_attention_layernorm.weight"] = rng.uniform(0.5, 1.5, C)
        w[p + "self_attn.q_proj.weight"] = rng.normal(0, 0.4, (NH * hs, C))
        w[p + "self_attn.k_proj.weight"] = rng.normal(0, 0.4, (NKV * hs, C))
        w[p + "self_attn.v_proj.weight"] = rng.normal(0, 0.3, (NKV * hs, C))
        w[p + "self_attn.o_proj.weight"] = rng.normal(0, 0.2, (C, NH * hs))
        w[p + "mlp.gate_proj.weight"] = rng.normal(0, 0.3, (F, C))
        w[p + "mlp.up_proj.weight"] = rng.normal(0, 0.3, (F, C))
        w[p + "mlp.down_proj.weight"] = rng.normal(0, 0.2, (C, F))
    if bf16:
        w = {k: to_bf16(v) for k, v in w.items()}
        # safetensors.numpy has no bfloat16: write the file ourselves
        header, off, blobs = {}, 0, []
        for k in sorted(w):
            b = w[k].tobytes()
            header[k] = {"dtype": "BF16", "shape": list(w[k].shape), "data_offsets": [off, off + len(b)]}
            off += len(b)
            blobs.append(b)
        h = json.dumps(header).encode()
        h += b" " * (-len(h) % 8)
        with open(os.path.join(d, "model.safetensors"), "wb") as f:
            f.write(len(h).to_bytes(8, "little") + h + b"".join(blobs))
    else:
        save_file({k: v.astype(np.float32) for k, v in w.items()}, os.path.join(d, "model.safetensors"),
                  metadata={"format": "pt"})
    json.dump(c, open(os.path.join(d, "config.json"), "w"), indent=2)


def load(d):
    from safetensors import safe_open
    c = json.load(open(os.path.join(d, "config.json")))
    path = os.path.join(d, "model.safetensors")
    w = {}
    try:
        with safe_open(path, "np") as f:
            for k in f.keys():
                w[k] = f.get_tensor(k).astype(np.float64)
    except Exception:  # BF16: read the file ourselves
        raw = open(path, "rb").read()
        n = int.from_bytes(raw[:8], "little")
        hdr = json.loads(raw[8:8 + n])
        for k, v in hdr.items():
            a, b = v["data_offsets"]
            w[k] = from_bf16(np.frombuffer(raw[8 + n + a:8 + n + b], np.uint16)).reshape(v["shape"]).astype(np.float64)
    return c, w


def rmsnorm(x, g, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * g


def rope(x, theta):  # x (T, H, hs): HF's rotate_half form
    T, H, hs = x.shape
    inv = theta ** (-np.arange(0, hs, 2, dtype=np.float64) / hs)
    ang = np.outer(np.arange(T), inv)
    cos = np.concatenate([np.cos(ang)] * 2, -1)[:, None, :]
    sin = np.concatenate([np.sin(ang)] * 2, -1)[:, None, :]
    rot = np.concatenate([-x[..., hs // 2:], x[..., :hs // 2]], -1)
    return x * cos + rot * sin


def forward(c, w, ids):  # ids (T,) -> logits (T, V)
    C, hs = c["hidden_size"], c["head_dim"]
    NH, NKV, eps, theta = c["num_attention_heads"], c["num_key_value_heads"], c["rms_norm_eps"], c["rope_theta"]
    T = len(ids)
    x = w["model.embed_tokens.weight"][ids]
    mask = np.triu(np.full((T, T), -np.inf), 1)
    for l in range(c["num_hidden_layers"]):
        p = "model.layers.%d." % l
        h = rmsnorm(x, w[p + "input_layernorm.weight"], eps)
        q = rope((h @ w[p + "self_attn.q_proj.weight"].T).reshape(T, NH, hs), theta)
        k = rope((h @ w[p + "self_attn.k_proj.weight"].T).reshape(T, NKV, hs), theta)
        v = (h @ w[p + "self_attn.v_proj.weight"].T).reshape(T, NKV, hs)
        out = np.zeros((T, NH, hs))
        for hd in range(NH):
            g = hd // (NH // NKV)
            s = q[:, hd] @ k[:, g].T / np.sqrt(hs) + mask
            s = np.exp(s - s.max(-1, keepdims=True))
            out[:, hd] = (s / s.sum(-1, keepdims=True)) @ v[:, g]
        x = x + out.reshape(T, NH * hs) @ w[p + "self_attn.o_proj.weight"].T
        h = rmsnorm(x, w[p + "post_attention_layernorm.weight"], eps)
        gate = h @ w[p + "mlp.gate_proj.weight"].T
        x = x + ((gate / (1 + np.exp(-gate))) * (h @ w[p + "mlp.up_proj.weight"].T)) @ w[p + "mlp.down_proj.weight"].T
    x = rmsnorm(x, w["model.norm.weight"], eps)
    head = w.get("lm_head.weight", w["model.embed_tokens.weight"])
    return x @ head.T


def check(d, text, logits, B, T):
    c, w = load(d)
    data = np.frombuffer(open(text, "rb").read(), np.uint8).astype(np.int64)
    n = len(data)
    n_val = int(n * float(np.float32(0.1)))  # the loader's (double)n * 0.1f
    n_train = n - n_val
    V = c["vocab_size"]
    got = np.fromfile(logits, np.float32)
    if got.size != B * T * V:
        print("FAIL logits file has %d floats, expected %d x %d x %d" % (got.size, B, T, V))
        return 1
    got = got.reshape(B, T, V).astype(np.float64)
    worst, scale = 0.0, 0.0
    for b in range(B):
        ids = data[n_train + b * T:n_train + b * T + T]
        ref = forward(c, w, ids)
        worst = max(worst, np.abs(ref - got[b]).max())
        scale = max(scale, np.abs(ref).max())
    tol = 1e-5 * max(1.0, scale)
    tag = "%s: max |kit - numpy| = %.3g over %dx%dx%d logits (largest |logit| %.3g, tol %.2g)" % (
        os.path.basename(d.rstrip("/")), worst, B, T, V, scale, tol)
    print(("ok   " if worst <= tol else "FAIL ") + tag)
    return 0 if worst <= tol else 1


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "write":
        write(sys.argv[2], "--tied" in sys.argv, "--bf16" in sys.argv)
    elif len(sys.argv) == 7 and sys.argv[1] == "check":
        sys.exit(check(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), int(sys.argv[6])))
    else:
        print(__doc__)
        sys.exit(2)
