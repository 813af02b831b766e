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
  export_ref.py llamacpp GGUF DATA LOGITS B T TYPE
      llama.cpp runs the GGUF file (tools/export_gguf --type TYPE): the
      llama_cpp Python module (llama-cpp-python's ctypes API over libllama;
      LLAMA_CPP_LIB_PATH may name the directory of a libllama.so built
      apart) evaluates each row of validation batch 0 of DATA (a text file's
      bytes or an llm.c token shard's ids, cut as the kit's loader cuts
      them) in an empty KV cache of F32 keys and values, logits at every
      position, and compares them with the kit's --dump-logits LOGITS:
      max |kit - llama.cpp| <= 1e-4 x max(1, largest |logit|) for F32 (two
      float32 forwards that sum in other orders), 2e-2 x for F16, 1e-1 x
      for BF16 (the weights rounded: 11 and 8 significant bits).
  export_ref.py llamacpp-gen GGUF PROMPT N KITOUT
      greedy generation in llama.cpp: PROMPT tokenized by llama.cpp (with
      the BOS when the file says add_bos_token), one decode of the prompt,
      then N tokens, each the argmax of the last logits (the smallest id of
      a tie, as the kit's top-k 1), fed back one position at a time through
      llama.cpp's KV cache; the text of the prompt and the N tokens (each
      token's piece, as the kit prints them) must equal what examples/llama
      --sample N --top-k 1 --prompt PROMPT printed (KITOUT, between its
      "---- sample" line and the closing "----").
  export_ref.py llamacpp-tok GGUF SHARD TEXT
      llama.cpp's tokenizer on TEXT (add_special: the BOS as the file says;
      parse_special: special tokens written in the text are tokens) gives
      the ids the kit wrote for it in SHARD (tools/make_shard --tokenizer
      FILE [--bos] -o SHARD TEXT), and the pieces of those ids (what
      llama.cpp prints as it generates) are TEXT again (a "llama"
      vocabulary's first piece after its add_space_prefix space). A note
      says what llama_detokenize gives: it cleans the spaces before
      punctuation for every BPE vocabulary, whatever the file says.
  export_ref.py hf DIR DATA LOGITS B T PROMPT N KITOUT [DIR DATA ...]
      transformers with PyTorch, one process for several models (importing
      torch is the slow part), 8 arguments a model: AutoModelForCausalLM
      .from_pretrained(DIR) in float32, its logits for validation batch 0 of
      DATA equal the kit's LOGITS, max |kit - torch| <= 1e-4 x max(1,
      largest |logit|); and greedy generate(do_sample=False,
      max_new_tokens=N) from PROMPT (AutoTokenizer, BOS included, when DIR
      has a tokenizer.json; the prompt's bytes for the kit's byte
      vocabulary): the prompt's decode and each new token's bytes (the
      tokenizer.json piece: byte-level characters, or "\u2581" and <0xNN>
      turned back into bytes) equal the kit's --top-k 1 sample in KITOUT.
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


# --- llama.cpp, through the llama_cpp module's ctypes API -------------------------------
def read_ids(path):  # a text file's bytes, or an llm.c shard's ids (uint16 or uint32)
    b = open(path, "rb").read()
    h = np.frombuffer(b[:1024], np.int32) if len(b) >= 1024 else None
    if h is not None and h[0] in (20240520, 20240801):
        return np.frombuffer(b[1024:], np.uint16 if h[0] == 20240520 else np.uint32)[:h[2]].astype(np.int64)
    return np.frombuffer(b, np.uint8).astype(np.int64)


class LlamaCpp:
    """one model and one context of llama.cpp: F32 K/V cache, logits at every
    position of a decode, quiet (its log goes nowhere)"""
    def __init__(self, path, n_ctx):
        import ctypes
        import llama_cpp as lc
        self.lc, self.ct = lc, ctypes
        self._quiet = lc.llama_log_callback(lambda level, text, data: None)
        lc.llama_log_set(self._quiet, ctypes.c_void_p(0))
        lc.llama_backend_init()
        mp = lc.llama_model_default_params()
        self.model = lc.llama_model_load_from_file(path.encode(), mp)
        if not self.model:
            raise SystemExit("FAIL llama.cpp could not load %s" % path)
        cp = lc.llama_context_default_params()
        cp.n_ctx = cp.n_batch = cp.n_ubatch = n_ctx
        cp.n_threads = cp.n_threads_batch = 1
        cp.type_k = cp.type_v = 0  # GGML_TYPE_F32 (the default F16 cache rounds keys and values)
        cp.flash_attn_type = 0  # disabled: with flash attention llama.cpp casts F32 keys and values to F16
        cp.no_perf = True
        self.ctx = lc.llama_init_from_model(self.model, cp)
        if not self.ctx:
            raise SystemExit("FAIL llama.cpp could not make a context for %s" % path)
        self.vocab = lc.llama_model_get_vocab(self.model)
        self.V = lc.llama_vocab_n_tokens(self.vocab)
        self.n_past = 0

    def clear(self):
        self.lc.llama_memory_clear(self.lc.llama_get_memory(self.ctx), True)
        self.n_past = 0

    def decode(self, ids):  # ids at positions n_past..; returns their logits (len(ids), V)
        lc, n = self.lc, len(ids)
        b = lc.llama_batch_init(n, 0, 1)
        for i, t in enumerate(ids):
            b.token[i], b.pos[i], b.n_seq_id[i], b.logits[i] = int(t), self.n_past + i, 1, 1
            b.seq_id[i][0] = 0
        b.n_tokens = n
        rc = lc.llama_decode(self.ctx, b)
        if rc != 0:
            lc.llama_batch_free(b)
            raise SystemExit("FAIL llama_decode returned %d" % rc)
        out = np.array([np.ctypeslib.as_array(lc.llama_get_logits_ith(self.ctx, i), (self.V,)) for i in range(n)])
        lc.llama_batch_free(b)
        self.n_past += n
        return out

    def tokenize(self, text):  # bytes -> ids, with the file's BOS, special tokens parsed
        cap = len(text) + 16
        buf = (self.lc.llama_token * cap)()
        n = self.lc.llama_tokenize(self.vocab, text, len(text), buf, cap, True, True)
        if n < 0:
            raise SystemExit("FAIL llama_tokenize: %d" % n)
        return list(buf[:n])

    def piece(self, t):  # one token's text as llama.cpp renders it (special tokens included)
        buf = self.ct.create_string_buffer(256)
        n = self.lc.llama_token_to_piece(self.vocab, int(t), buf, 256, 0, True)
        return buf.raw[:max(n, 0)]

    def detokenize(self, ids, special=False):  # special: the BOS and other special tokens written out
        cap = 16 * len(ids) + 64
        buf = self.ct.create_string_buffer(cap)
        arr = (self.lc.llama_token * len(ids))(*ids)
        n = self.lc.llama_detokenize(self.vocab, arr, len(ids), buf, cap, not special, special)
        return buf.raw[:max(n, 0)]


def follow(step, head, pieces, want, n, tol):
    """the kit's greedy sample WANT (bytes: the prompt's text HEAD, then n
    tokens' pieces) against another program's logits: step(None) gives the
    logits after the prompt, step(t) feeds token t and gives the next ones.
    Each token is the program's argmax when that argmax's piece is the kit's
    next text; otherwise (a near tie that float noise decides) the kit's
    token must score within tol of the argmax, and is fed instead.
    Returns (ok, number of such ties, what went wrong)."""
    if not want.startswith(head):
        return False, 0, "the prompt's text %r is not the kit's %r" % (head[:40], want[:40])
    p, ties, lg = len(head), 0, step(None)
    for i in range(n):
        a = int(np.argmax(lg))
        if pieces[a] and want.startswith(pieces[a], p):
            t = a
        else:
            cand = [c for c in range(len(pieces)) if pieces[c] and want.startswith(pieces[c], p)]
            if not cand:
                return False, ties, "token %d: no token's text is the kit's next %r" % (i, want[p:p + 12])
            t = max(cand, key=lambda c: lg[c])
            if lg[a] - lg[t] > tol:
                return False, ties, "token %d: the argmax %d (%r) beats the kit's %d (%r) by %.3g > %.2g" % (
                    i, a, pieces[a], t, pieces[t], lg[a] - lg[t], tol)
            ties += 1
        p += len(pieces[t])
        lg = step(t)
    return p == len(want), ties, "" if p == len(want) else "%d bytes of the kit's text left over" % (len(want) - p)


def kit_sample(kitout):  # the text examples/* --sample printed, between its two marker lines
    out = open(kitout, "rb").read()
    i = out.find(b"---- sample")
    return out[out.index(b"\n", i) + 1:out.rindex(b"\n----")] if i >= 0 else b""


def llamacpp_logits(path, data, logits, B, T, kind):
    ids_all = read_ids(data)
    n_val = int(len(ids_all) * float(np.float32(0.1)))
    n_train = len(ids_all) - n_val
    got = np.fromfile(logits, np.float32)
    Vp = got.size // (B * T)
    m = LlamaCpp(path, T)
    got = got.reshape(B, T, Vp)[:, :, :m.V].astype(np.float64)
    worst, scale = 0.0, 0.0
    for b in range(B):
        m.clear()
        ref = m.decode(ids_all[n_train + b * T:n_train + b * T + T]).astype(np.float64)
        worst = max(worst, np.abs(ref - got[b]).max())
        scale = max(scale, np.abs(got[b]).max())
    tol = {"f32": 1e-4, "f16": 2e-2, "bf16": 1e-1}[kind] * max(1.0, scale)
    tag = "llama.cpp (%s): max |kit - llama.cpp| = %.3g over %dx%dx%d logits (largest |logit| %.3g, tol %.2g)" % (
        kind, worst, B, T, m.V, scale, tol)
    print(("ok   " if worst <= tol else "FAIL ") + tag)
    return 0 if worst <= tol else 1


def llamacpp_gen(path, prompt, n, kitout):
    want = kit_sample(kitout)
    m = LlamaCpp(path, 512)
    ids = m.tokenize(prompt.encode())
    lg = m.decode(ids)[-1]
    gen = []
    for _ in range(n):  # free-running greedy through llama.cpp's KV cache
        t = int(np.argmax(lg))  # the first of equal maxima: the smallest id, as the kit's top-k 1
        gen.append(t)
        lg = m.decode([t])[-1]
    head = m.detokenize(ids, True)
    pieces = [m.piece(t) for t in range(m.V)]
    text = head + b"".join(pieces[t] for t in gen)
    msg = "llama.cpp's greedy %d tokens after %d prompt ids" % (n, len(ids))
    if text == want:
        print("ok   %s equal the kit's --top-k 1 sample (%d bytes of text)" % (msg, len(text)))
        return 0
    m.clear()  # they part: follow the kit's tokens, so that each step can be judged

    def step(t):
        return m.decode(ids if t is None else [t])[-1]
    ok, ties, why = follow(step, head, pieces, want, n, 1e-4 * max(1.0, float(np.abs(lg).max())))
    print(("ok   " if ok else "FAIL ") + "%s part from the kit's --top-k 1 sample; fed the kit's tokens, %s" % (
        msg, "each is llama.cpp's argmax but %d near ties (within float32 noise)" % ties if ok else why))
    return 0 if ok else 1


def llamacpp_tok(path, shard, text):
    want = [int(x) for x in read_ids(shard)]
    t = open(text, "rb").read()
    m = LlamaCpp(path, 64)
    got = m.tokenize(t)
    first = next((i for i in range(min(len(got), len(want))) if got[i] != want[i]), min(len(got), len(want)))
    same = got == want
    # the pieces as llama.cpp prints them while it generates; a "llama" (SentencePiece) vocabulary's
    # first piece carries the space add_space_prefix put before the text
    lead = 1 if got and m.lc.llama_vocab_get_add_bos(m.vocab) and got[0] == m.lc.llama_vocab_bos(m.vocab) else 0
    back = b"".join(m.piece(i) for i in got[lead:])  # without the BOS it put first
    sp = m.lc.llama_vocab_get_add_bos(m.vocab) and back[:1] == b" " and t[:1] != b" "
    print(("ok   " if same else "FAIL ") + "llama.cpp's tokenizer: %d ids for %d bytes %s the kit's %d%s" % (
        len(got), len(t), "equal" if same else "differ from", len(want),
        "" if same else " at id %d (llama.cpp %s, kit %s)" % (first, got[first:first + 6], want[first:first + 6])))
    ok = back[1:] == t if sp else back == t
    print(("ok   " if ok else "FAIL ") + "llama.cpp's pieces of those ids are the text again%s%s" % (
        " (after the prefix space)" if sp else "", "" if ok else " (%d bytes, not %d)" % (len(back), len(t))))
    d = m.detokenize(got)  # llama_detokenize: a BPE vocabulary's spaces before punctuation are cleaned
    print("note llama_detokenize gives %d bytes for the %d (%s)" % (len(d), len(t), "the same text" if d == t else "not the text"))
    return 0 if same and ok else 1


# --- transformers with PyTorch ------------------------------------------------------------
def piece_bytes(d):  # id -> the bytes of its token, from DIR/tokenizer.json (None: the byte vocabulary)
    p = os.path.join(d, "tokenizer.json")
    if not os.path.exists(p):
        return None
    j = json.load(open(p, encoding="utf-8"))
    tok = dict((v, k) for k, v in j["model"]["vocab"].items())
    special = set()
    for a in j.get("added_tokens", []):
        tok[a["id"]] = a["content"]
        special.add(a["id"])
    c2b = dict((c, b) for b, c in gpt2_bytes().items())
    bytelevel = "ByteLevel" in json.dumps(j.get("decoder"))
    out = {}
    for i, t in tok.items():
        if i in special:
            out[i] = t.encode()
        elif bytelevel:
            out[i] = bytes(c2b[ch] for ch in t)
        elif len(t) == 6 and t.startswith("<0x") and t.endswith(">"):
            out[i] = bytes([int(t[3:5], 16)])
        else:
            out[i] = t.replace("\u2581", " ").encode()
    return out


def hf_torch(d, data, logits, B, T):
    import torch
    from transformers import AutoModelForCausalLM
    m = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).eval()
    name = os.path.basename(d.rstrip("/"))
    ids_all = read_ids(data)
    n_val = int(len(ids_all) * float(np.float32(0.1)))
    n_train = len(ids_all) - n_val
    rows = np.stack([ids_all[n_train + b * T:n_train + b * T + T] for b in range(B)])
    with torch.no_grad():
        ref = m(torch.tensor(rows)).logits.double().numpy()
    V = ref.shape[-1]
    got = np.fromfile(logits, np.float32)
    got = got.reshape(B, T, got.size // (B * T))[:, :, :V].astype(np.float64)
    worst, scale = np.abs(ref - got).max(), np.abs(got).max()
    tol = 1e-4 * max(1.0, scale)
    tag = "%s: transformers %s (%s): max |kit - torch| = %.3g over %dx%dx%d logits (largest |logit| %.3g, tol %.2g)" % (
        name, __import__("transformers").__version__, type(m).__name__, worst, B, T, V, scale, tol)
    print(("ok   " if worst <= tol else "FAIL ") + tag)
    return 0 if worst <= tol else 1


def hf_gen(d, prompt, n, kitout):
    import torch
    from transformers import AutoModelForCausalLM
    want = kit_sample(kitout)
    m = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).eval()
    pieces = piece_bytes(d)
    if pieces is None:
        ids = list(prompt.encode())
        head = prompt.encode()
        pieces = [bytes([t]) for t in range(256)]
    else:
        from transformers import AutoTokenizer
        tk = AutoTokenizer.from_pretrained(d)
        ids = tk(prompt)["input_ids"]
        head = tk.decode(ids, skip_special_tokens=False).encode()
        pieces = [pieces.get(t, b"") for t in range(m.config.vocab_size)]
    with torch.no_grad():
        g = m.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long), do_sample=False,
                       max_new_tokens=n, min_new_tokens=n, pad_token_id=0)[0, len(ids):].tolist()
    text = head + b"".join(pieces[t] for t in g)
    name = os.path.basename(d.rstrip("/"))
    msg = "%s: transformers' greedy generate, %d tokens after %d prompt ids," % (name, len(g), len(ids))
    if text == want:
        print("ok   %s equal the kit's --top-k 1 sample (%d bytes of text)" % (msg, len(text)))
        return 0
    seq = list(ids)

    def step(t):  # the whole sequence again each token (no cache): 40 tokens of a tiny model
        if t is not None:
            seq.append(t)
        with torch.no_grad():
            return m(torch.tensor([seq])).logits[0, -1].double().numpy()
    first = step(None)
    ok, ties, why = follow(lambda t: first if t is None else step(t), head, pieces, want, n,
                           1e-4 * max(1.0, float(np.abs(first).max())))
    print(("ok   " if ok else "FAIL ") + "%s part from the kit's --top-k 1 sample; fed the kit's tokens, %s" % (
        msg, "each is transformers' argmax but %d near ties (within float32 noise)" % ties if ok else why))
    return 0 if ok else 1


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "tok-train":
        sys.exit(tok_train(sys.argv[2]))
    if len(sys.argv) == 6 and sys.argv[1] == "tok-check":
        sys.exit(tok_check(*sys.argv[2:6]))
    if len(sys.argv) == 5 and sys.argv[1] == "gguf":
        sys.exit(gguf_check(sys.argv[2], sys.argv[3], sys.argv[4]))
    if len(sys.argv) == 7 and sys.argv[1] == "check":
        sys.exit(check(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), int(sys.argv[6])))
    if len(sys.argv) == 8 and sys.argv[1] == "llamacpp":
        sys.exit(llamacpp_logits(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), int(sys.argv[6]), sys.argv[7]))
    if len(sys.argv) == 6 and sys.argv[1] == "llamacpp-gen":
        sys.exit(llamacpp_gen(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]))
    if len(sys.argv) == 5 and sys.argv[1] == "llamacpp-tok":
        sys.exit(llamacpp_tok(sys.argv[2], sys.argv[3], sys.argv[4]))
    if len(sys.argv) >= 10 and (len(sys.argv) - 2) % 8 == 0 and sys.argv[1] == "hf":
        rc = 0
        for i in range(2, len(sys.argv), 8):
            d, data, logits, B, T, prompt, n, kitout = sys.argv[i:i + 8]
            rc |= hf_torch(d, data, logits, int(B), int(T))
            rc |= hf_gen(d, prompt, int(n), kitout)
        sys.exit(rc)
    print(__doc__)
    sys.exit(2)
