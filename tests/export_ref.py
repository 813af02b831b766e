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
  export_ref.py gguf CKPT FILE TYPE
      FILE, written by tools/export_gguf --type TYPE from the kit's llama
      CKPT, read back with the gguf package: every key (architecture,
      dimensions, RoPE, file type, the byte tokenizer) has the checkpoint's
      value, and every tensor equals the checkpoint's after the documented
      changes (llama.cpp's names; q/k rows turned from halves to neighbour
      pairs; the vocabulary unpadded; llama3's rope_freqs = plain / scaled
      frequency, from the NumPy formulas of llama_ref.py), bit for bit in
      F32, and as NumPy rounds them (float16; bfloat16 to nearest even) in
      F16/BF16 (vectors stay F32).
  export_ref.py tok-train OUTDIR
      trains two tokenizers with the `tokenizers` package, with
      tests/hf_tokenizer_ref.py's trainers: OUTDIR/bytelevel.json (Llama 3
      style: Split + ByteLevel, "<|begin_of_text|> $A"), OUTDIR/gpt2.json
      (GPT-2 style, the same vocabulary size) and OUTDIR/metaspace.json
      (Llama 2 style: byte fallback, "▁", "<s> $A"); prints "NAME V" lines.
  export_ref.py tok-check STYLE TOKJSON HFDIR GGUF
      the tokenizer exported from TOKJSON (STYLE llama3, gpt2 or llama2):
      HFDIR/tokenizer.json byte-identical, encoding a sample as the
      original, HFDIR/tokenizer_config.json's class and special tokens,
      and where transformers is installed AutoTokenizer on HFDIR (HFDIR "-":
      not checked); GGUF's tokenizer.ggml.* read back with the
      gguf package: model, pre, tokens = the file's vocabulary in id order,
      merges = the file's (gpt2) or none and scores -rank (llama), each
      token's type, bos/eos/unk ids, add_bos_token.
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


def gpt2_bytes():  # GPT-2's byte -> character map
    vis = list(range(33, 127)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    m, k = {}, 0
    for b in range(256):
        if b in vis:
            m[b] = chr(b)
        else:
            m[b] = chr(256 + k)
            k += 1
    return m


def gguf_check(ckpt, path, kind):
    from safetensors import safe_open
    from gguf import GGUFReader
    with safe_open(ckpt, "np") as f:
        meta = f.metadata()
        w = {k: f.get_tensor(k) for k in f.keys()}
    M = lambda k: int(meta["llama." + k])  # noqa: E731
    L, NH, NKV, hs, V = M("n_layer"), M("n_head"), M("n_kv_head"), M("head_dim"), M("vocab_size")
    r = GGUFReader(path)
    bad = 0

    def val(k):
        fl = r.fields[k]
        if fl.types[0].name == "STRING":
            return bytes(fl.parts[fl.data[0]]).decode()
        if fl.types[0].name == "ARRAY":
            return [bytes(fl.parts[i]).decode() if fl.types[1].name == "STRING" else fl.parts[i][0] for i in fl.data]
        return fl.parts[fl.data[0]][0]
    want = {"general.architecture": "llama", "general.file_type": {"f32": 0, "f16": 1, "bf16": 32}[kind],
            "llama.context_length": M("block_size"), "llama.embedding_length": M("n_embd"), "llama.block_count": L,
            "llama.feed_forward_length": M("ffn_hidden"), "llama.attention.head_count": NH,
            "llama.attention.head_count_kv": NKV, "llama.rope.dimension_count": hs, "llama.vocab_size": V,
            "llama.rope.freq_base": np.float32(float(meta["llama.rope_theta"])),
            "llama.attention.layer_norm_rms_epsilon": np.float32(float(meta["llama.norm_eps"]))}
    if V == 256:
        b2c = gpt2_bytes()
        want["tokenizer.ggml.model"] = "gpt2"
        want["tokenizer.ggml.tokens"] = [b2c[b] for b in range(256)]
    keys_bad = [k for k, v in want.items() if k not in r.fields or val(k) != v]
    bad += len(keys_bad) > 0
    print(("ok   " if not keys_bad else "FAIL ") + "%d keys checked (architecture, dimensions, RoPE, file type%s)%s" % (
        len(want), ", byte tokenizer" if V == 256 else "", "; wrong: %s" % keys_bad if keys_bad else ""))

    def perm(a, heads):  # rows of each head: halves -> neighbour pairs
        return a.reshape(heads, 2, hs // 2, -1).swapaxes(1, 2).reshape(a.shape)
    exp = {"token_embd.weight": w["model.embed_tokens.weight"][:V], "output_norm.weight": w["model.norm.weight"]}
    if "lm_head.weight" in w:
        exp["output.weight"] = w["lm_head.weight"][:V]
    for l in range(L):
        p, b = "model.layers.%d." % l, "blk.%d." % l
        qkv = w[p + "self_attn.qkv_proj.weight"]
        exp[b + "attn_q.weight"] = perm(qkv[:NH * hs], NH)
        exp[b + "attn_k.weight"] = perm(qkv[NH * hs:(NH + NKV) * hs], NKV)
        exp[b + "attn_v.weight"] = qkv[(NH + NKV) * hs:]
        for a, c in (("attn_norm", "input_layernorm"), ("attn_output", "self_attn.o_proj"),
                     ("ffn_norm", "post_attention_layernorm"), ("ffn_gate", "mlp.gate_proj"),
                     ("ffn_up", "mlp.up_proj"), ("ffn_down", "mlp.down_proj")):
            exp[b + a + ".weight"] = w[p + c + ".weight"]
    if meta.get("llama.rope_type") == "3":
        c = {"head_dim": hs, "rope_theta": float(meta["llama.rope_theta"]), "max_position_embeddings": 1,
             "rope_scaling": {"rope_type": "llama3", "factor": float(meta["llama.rope_factor"]),
                              "low_freq_factor": float(meta["llama.rope_low_freq_factor"]),
                              "high_freq_factor": float(meta["llama.rope_high_freq_factor"]),
                              "original_max_position_embeddings": int(meta["llama.rope_original_max_pos"])}}
        plain = dict(c, rope_scaling=None)
        exp["rope_freqs.weight"] = (llama_ref.inv_freq(plain, 1) / llama_ref.inv_freq(c, 1)).astype(np.float32)
    got = {t.name: t for t in r.tensors}
    names_bad = sorted(set(got) ^ set(exp))
    worst, n_exact = 0.0, 0
    for k in sorted(set(got) & set(exp)):
        e = np.ascontiguousarray(exp[k], np.float32)
        t = got[k]
        if kind == "f32" or e.ndim == 1:
            ok = t.tensor_type.name == "F32" and np.array_equal(np.asarray(t.data).view(np.uint32).ravel(), e.view(np.uint32).ravel())
        elif kind == "f16":
            ok = t.tensor_type.name == "F16" and np.array_equal(np.asarray(t.data).view(np.uint16).ravel(), e.astype(np.float16).view(np.uint16).ravel())
        else:
            ok = t.tensor_type.name == "BF16" and np.array_equal(np.asarray(t.data).view(np.uint16).ravel(), llama_ref.to_bf16(e).ravel())
        n_exact += ok
        if not ok:
            names_bad.append(k)
    bad += len(names_bad) > 0
    print(("ok   " if not names_bad else "FAIL ") + "%d of %d tensors bit-equal to the checkpoint (%s)%s" % (
        n_exact, len(exp), kind, "; wrong or missing: %s" % names_bad[:5] if names_bad else ""))
    return 1 if bad else 0


def tok_train(out):
    import hf_tokenizer_ref as h
    os.makedirs(out, exist_ok=True)
    lines = h.training_text()
    files = {"bytelevel": json.loads(h.train_bytelevel(lines, True).to_str()),
             "gpt2": json.loads(h.train_bytelevel(lines, False).to_str()), "metaspace": h.train_metaspace(lines)}
    for name, d in files.items():
        with open(os.path.join(out, name + ".json"), "w", encoding="utf-8") as f:
            json.dump(d, f, ensure_ascii=False)
        ids = list(d["model"]["vocab"].values()) + [a["id"] for a in d["added_tokens"]]
        print(name, max(ids) + 1)
    return 0


SAMPLE = "Hello wörld,  it's 12345 TODO: <tag> 你好 \U0001F600 foo bar\n\tthe end <|endoftext|> </s>"


def tok_check(style, tokjson, hfdir, path):
    from gguf import GGUFReader
    from tokenizers import Tokenizer
    bad = 0

    def say(ok, what):
        nonlocal bad
        bad += not ok
        print(("ok   " if ok else "FAIL ") + what)
    raw = open(tokjson, "rb").read()
    d = json.loads(raw)
    added = {a["id"]: a for a in d["added_tokens"]}
    vocab = dict((i, t) for t, i in d["model"]["vocab"].items())
    vocab.update((i, a["content"]) for i, a in added.items())
    V = max(vocab) + 1
    want_tokens = [vocab.get(i, "[PAD%d]" % i) for i in range(V)]
    post = d.get("post_processor") or {}
    bos = [v["ids"][0] for v in (post.get("special_tokens") or {}).values()]
    bos = bos[0] if bos else None
    specials = {a["content"]: i for i, a in added.items() if a["special"]}
    eos = next((specials[n] for n in ("</s>", "<|end_of_text|>", "<|endoftext|>") if n in specials), None)
    unk = d["model"]["vocab"].get(d["model"].get("unk_token")) if d["model"].get("unk_token") else None
    if hfdir != "-":
        got = open(os.path.join(hfdir, "tokenizer.json"), "rb").read()
        say(got == raw, "%s: DIR/tokenizer.json is byte-identical to the input (%d bytes)" % (style, len(raw)))
        a, b = Tokenizer.from_file(tokjson), Tokenizer.from_file(os.path.join(hfdir, "tokenizer.json"))
        ea, eb = a.encode(SAMPLE).ids, b.encode(SAMPLE).ids
        say(ea == eb and len(ea) > 10, "%s: the copy encodes a sample as the original (%d ids)" % (style, len(ea)))
        c = json.load(open(os.path.join(hfdir, "tokenizer_config.json")))
        want = {"tokenizer_class": "PreTrainedTokenizerFast", "clean_up_tokenization_spaces": False}
        for k, i in (("bos_token", bos), ("eos_token", eos), ("unk_token", unk)):
            if i is not None:
                want[k] = vocab[i]
        say(c == want, "%s: tokenizer_config.json is %s" % (style, c if c == want else "%s, not %s" % (c, want)))
        try:  # where transformers is installed (not in CI: no network there): AutoTokenizer on the directory
            from transformers import AutoTokenizer
        except ImportError:
            AutoTokenizer = None
            print("skip %s: transformers is not installed (AutoTokenizer not tried)" % style)
        if AutoTokenizer is not None:
            t = AutoTokenizer.from_pretrained(hfdir)
            got = (t(SAMPLE)["input_ids"], t.bos_token, t.eos_token)
            exp = (a.encode(SAMPLE).ids, want.get("bos_token"), want.get("eos_token"))
            say(got == exp, "%s: transformers' AutoTokenizer loads DIR: same ids, bos %s, eos %s" % (style, got[1], got[2]))
    r = GGUFReader(path)

    def val(k):
        if k not in r.fields:
            return None
        fl = r.fields[k]
        if fl.types[0].name == "STRING":
            return bytes(fl.parts[fl.data[0]]).decode()
        if fl.types[0].name == "ARRAY":
            return [bytes(fl.parts[i]).decode() if fl.types[1].name == "STRING" else fl.parts[i][0].item() for i in fl.data]
        return fl.parts[fl.data[0]][0].item()
    llama = style == "llama2"
    pre = {"llama3": "llama-bpe", "gpt2": "gpt-2", "llama2": None}[style]
    say(val("tokenizer.ggml.model") == ("llama" if llama else "gpt2") and val("tokenizer.ggml.pre") == pre,
        "%s: tokenizer.ggml.model %s, pre %s" % (style, val("tokenizer.ggml.model"), val("tokenizer.ggml.pre")))
    toks = val("tokenizer.ggml.tokens")
    say(toks == want_tokens and val("llama.vocab_size") == V,
        "%s: %d tokens, equal to tokenizer.json's vocabulary + added tokens in id order" % (style, len(toks or [])))
    types = val("tokenizer.ggml.token_type") or []
    want_types = []
    for i in range(V):
        t = want_tokens[i]
        if i == unk: want_types.append(2)
        elif llama and len(t) == 6 and t.startswith("<0x") and t.endswith(">"): want_types.append(6)
        elif i in added: want_types.append(3 if added[i]["special"] else 4)
        else: want_types.append(1)
    say(types == want_types, "%s: token types right: %d control, %d user-defined, %d byte, %d unknown%s" % (
        style, want_types.count(3), want_types.count(4), want_types.count(6), want_types.count(2),
        "" if types == want_types else "; first wrong id %d" % next((i for i in range(V) if i >= len(types) or types[i] != want_types[i]), -1)))
    if llama:
        sc = val("tokenizer.ggml.scores") or []
        # the token merge r makes scores -r (the earliest such merge); the others 0
        vocab = d["model"]["vocab"]
        want_sc = [0.0] * V
        for rank, mg in enumerate(d["model"]["merges"]):
            a, b = mg.split(" ", 1) if isinstance(mg, str) else mg
            t = vocab.get(a + b)
            if t is not None and t < V and want_sc[t] == 0.0 and rank > 0: want_sc[t] = -float(rank)
        say(val("tokenizer.ggml.merges") is None and len(sc) == V and sc == want_sc,
            "%s: no merges, %d scores: minus the rank of the merge that makes each token (%d tokens made by merges)%s" % (
                style, len(sc), sum(1 for x in want_sc if x < 0),
                "" if sc == want_sc else "; first wrong id %d" % next((i for i in range(V) if i >= len(sc) or sc[i] != want_sc[i]), -1)))
    else:
        m = [x if isinstance(x, str) else " ".join(x) for x in d["model"]["merges"]]
        got = val("tokenizer.ggml.merges") or []
        say(got == m, "%s: %d merges, equal to tokenizer.json's in order%s" % (style, len(got), "" if got == m else " (want %d)" % len(m)))
    ids = (val("tokenizer.ggml.bos_token_id"), val("tokenizer.ggml.eos_token_id"), val("tokenizer.ggml.unknown_token_id"),
           val("tokenizer.ggml.add_bos_token"))
    say(ids == (bos, eos, unk, bos is not None), "%s: bos %s, eos %s, unk %s, add_bos_token %s" % ((style,) + ids))
    return 1 if bad else 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "tok-train":
        sys.exit(tok_train(sys.argv[2]))
    if len(sys.argv) == 6 and sys.argv[1] == "tok-check":
        sys.exit(tok_check(*sys.argv[2:6]))
    if len(sys.argv) == 5 and sys.argv[1] == "gguf":
        sys.exit(gguf_check(sys.argv[2], sys.argv[3], sys.argv[4]))
    if len(sys.argv) == 7 and sys.argv[1] == "check":
        sys.exit(check(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), int(sys.argv[6])))
    print(__doc__)
    sys.exit(2)
