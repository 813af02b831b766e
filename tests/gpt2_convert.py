# tests/gpt2_convert.py - helper of tests/test_gpt2.sh: writes the files examples/gpt2 --init
# must read, from a model.safetensors that examples/gpt2 wrote:
#   vocab DIR TEXT          a small GPT-2-style BPE (vocab.json + merges.txt) learned on TEXT
#   hf SRC DST PREFIX       Hugging Face layout: Conv1D (in,out) matrices, unpadded wte,
#                           attn.bias mask buffers, optional "transformer." prefix, config.json
#   llmc SRC DST VERSION    llm.c model file (magic 20240326), version 3 (padded) or 1
# Needs numpy and safetensors.
import json, os, sys
import numpy as np
from safetensors import safe_open
from safetensors.numpy import load_file, save_file

def gpt2_alphabet():
    # GPT-2's byte -> printable character map (the visible Latin-1 bytes stand for themselves)
    vis = list(range(ord('!'), ord('~') + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    m, k = {}, 0
    for b in range(256):
        if b in vis: m[b] = chr(b)
        else: m[b] = chr(256 + k); k += 1
    return m

def make_vocab(d, text_path, n_merges=43):
    # a small BPE: the 256 bytes, the most frequent adjacent pairs of the text, <|endoftext|>
    alpha = gpt2_alphabet()
    vocab = {alpha[b]: b for b in range(256)}
    data = open(text_path, 'rb').read()
    seqs = [[alpha[b] for b in data]]
    merges = []
    for _ in range(n_merges):
        counts = {}
        for s in seqs:
            for a, b in zip(s, s[1:]):
                if a[-1] in (' ', 'Ġ') or 'Ġ' in b[1:]: continue
                counts[(a, b)] = counts.get((a, b), 0) + 1
        (a, b), _ = max(counts.items(), key=lambda kv: (kv[1], kv[0]))
        merges.append((a, b)); vocab[a + b] = len(vocab)
        out = []
        for s in seqs:
            r, i = [], 0
            while i < len(s):
                if i + 1 < len(s) and s[i] == a and s[i + 1] == b: r.append(a + b); i += 2
                else: r.append(s[i]); i += 1
            out.append(r)
        seqs = out
    vocab['<|endoftext|>'] = len(vocab)
    os.makedirs(d, exist_ok=True)
    json.dump(vocab, open(os.path.join(d, 'vocab.json'), 'w'), ensure_ascii=False)
    with open(os.path.join(d, 'merges.txt'), 'w', encoding='utf-8') as f:
        f.write('#version: 0.2\n')
        for a, b in merges: f.write(a + ' ' + b + '\n')

def read_model(src):
    with safe_open(src, 'np') as f: meta = f.metadata()
    return load_file(src), meta

def to_hf(src, dst, prefix):
    t, meta = read_model(src)
    V, L, ctx = int(meta['gpt2.vocab_size']), int(meta['gpt2.n_layer']), int(meta['gpt2.block_size'])
    out = {}
    for k, v in t.items():
        if k.endswith(('c_attn.weight', 'c_proj.weight', 'c_fc.weight')): v = np.ascontiguousarray(v.T)  # Conv1D: (in,out)
        if k == 'wte.weight': v = np.ascontiguousarray(v[:V])  # HF files are not padded
        out[prefix + k] = v
    for l in range(L):  # HF's causal-mask buffers, which a loader must skip
        out[prefix + 'h.%d.attn.bias' % l] = np.tril(np.ones((ctx, ctx), np.float32))[None, None]
    save_file(out, dst, metadata={'format': 'pt'})
    json.dump({'n_head': int(meta['gpt2.n_head']), 'n_layer': L}, open(os.path.join(os.path.dirname(dst) or '.', 'config.json'), 'w'))

def to_llmc(src, dst, version):
    t, meta = read_model(src)
    g = lambda k: int(meta['gpt2.' + k])
    V, Vp, L, NH, C, T = g('vocab_size'), g('padded_vocab'), g('n_layer'), g('n_head'), g('n_embd'), g('block_size')
    hdr = np.zeros(256, np.int32)
    hdr[:8] = [20240326, version, T, V, L, NH, C, Vp if version == 3 else 0]
    wte = t['wte.weight'] if version == 3 else t['wte.weight'][:V]
    parts = [wte, t['wpe.weight']]
    for name in ['ln_1.weight', 'ln_1.bias', 'attn.c_attn.weight', 'attn.c_attn.bias', 'attn.c_proj.weight',
                 'attn.c_proj.bias', 'ln_2.weight', 'ln_2.bias', 'mlp.c_fc.weight', 'mlp.c_fc.bias',
                 'mlp.c_proj.weight', 'mlp.c_proj.bias']:
        parts += [t['h.%d.%s' % (l, name)] for l in range(L)]
    parts += [t['ln_f.weight'], t['ln_f.bias']]
    with open(dst, 'wb') as f:
        f.write(hdr.tobytes())
        for p in parts: f.write(np.ascontiguousarray(p, np.float32).tobytes())

if __name__ == '__main__':
    cmd = sys.argv[1]
    if cmd == 'vocab': make_vocab(sys.argv[2], sys.argv[3])
    elif cmd == 'hf': to_hf(sys.argv[2], sys.argv[3], sys.argv[4] if len(sys.argv) > 4 else '')
    elif cmd == 'llmc': to_llmc(sys.argv[2], sys.argv[3], int(sys.argv[4]))
