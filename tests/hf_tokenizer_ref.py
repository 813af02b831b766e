#!/usr/bin/env python3
"""tests/hf_tokenizer_ref.py OUTDIR - the `tokenizers` side of
tests/test_hf_tokenizer.sh (no network, no torch); tests/export_ref.py
imports its trainers.

Trains with the `tokenizers` package, on text made from the repository's
own files (README.md, docs/*.md, the comments of the headers) plus
generated Unicode:
  gpt2    byte-level BPE, ByteLevel pre-tokenizer (GPT-2's regex)
  llama3  byte-level BPE, Split(Llama 3's regex) + ByteLevel, ignore_merges,
          TemplateProcessing "<|begin_of_text|> $A"
  llama2  BPE with byte_fallback and the "▁" metaspace normalizer
          (Prepend + Replace, Llama 2 / TinyLlama), "<s> $A"
and derives, from the same vocabularies, files that differ only in the
pre-tokenizer: qwen2 (Qwen2's regex), smollm (Digits + ByteLevel with
add_prefix_space), mistral (Metaspace pre-tokenizer, prepend_scheme
"first", no normalizer) and metasplit (Metaspace split: true, "always"),
and two with the NFC normalizer: qwen2nfc (qwen2 + "NFC") and llama2nfc
(llama2 with Sequence [NFC, Prepend, Replace]), each with added tokens
that NFC changes and one U+212B with normalized=False.
Every tokenizer has special and non-special added tokens.

Then writes held-out text (generated from a different seed, never seen in
training: >= 1 MB of documents mixing the corpus' words in new orders with
CJK, emoji, accented Latin, combining marks, whitespace runs, digit runs,
contractions, added tokens and NFC cases: decomposed and precomposed
accents, Hangul jamo, marks out of canonical order, singletons,
composition exclusions) and, per tokenizer, the package's ids and
decoded text for each document:
  docs.bin          int32 n_docs, then per document int32 length + bytes
  NAME.json         the tokenizer
  NAME.ids          per document int32 n + n int32 ids
  NAME.dec          per document int32 length + the package's decode
  nfc.bin           NFC cases for hf_tokenizer_check @nfc (write_nfc_cases)
  classes.bin       the package's regex class of every assigned code point,
                    for hf_tokenizer_check @classes (write_classes)
  pieces.bin        strings and the package's pre-tokenizer pieces of them
                    under GPT-2's, Llama 3's and Qwen2's regexes, for
                    hf_tokenizer_check @pieces (write_pieces)
The held-out documents end with FIXED_DOCS, edge cases kept whatever the
repository's text is.
Document i is encoded with add_special_tokens=True (the BOS) when
i % 10 == 0, with encode_special_tokens=True (special added tokens as
plain text) when i % 10 == 1, and plainly otherwise.
"""
import glob, json, os, random, re, struct, sys, time

from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers,
                        processors, trainers)

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
META = "\u2581"
L3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
      r"\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = L3.replace(r"\p{N}{1,3}", r"\p{N}")
GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"

# Edge cases of the split regexes, appended to the held-out documents (and
# to pieces.bin), so that they are tested whatever README.md and docs/ say:
FIXED_DOCS = [
    # U+110BA KAITHI SIGN NUKTA is a mark (Mn), not a letter: Llama 3's
    # regex cuts [ U+11099] [U+110BA `] [trn], not [ U+11099 U+110BA] [`trn]
    # (the kit classed it a letter once; held-out doc 171 of README.md and
    # docs/ at commit bcf452c found it)
    "the  \U00011099\U000110ba`trn_ddp_checkpoint_load_sharded` \n ## == in =  \U00011099\U000110ba\n"
    "x\U000110ba`y \U000110ba\U000110bazz\n",
    # letters, numbers and others above U+FFFF next to ASCII: U+10107 AEGEAN
    # NUMBER ONE (No), U+1D7CE MATHEMATICAL BOLD DIGIT ZERO (Nd), U+1E2F0
    # WANCHO DIGIT ZERO (Nd), U+10100 AEGEAN WORD SEPARATOR LINE (Po),
    # U+1D300 MONOGRAM FOR EARTH (So), U+10000 LINEAR B SYLLABLE A (Lo),
    # U+1D400 MATHEMATICAL BOLD CAPITAL A (Lu), U+20000 (a CJK ideograph)
    "a\U00010107b \U0001d7ce\U0001d7cf\U0001d7d0\U0001d7d1x \U0001e2f0\U0001e2f1y z\U00010100w "
    "\U0001d300q \U00010000\U00010001 \U0001d400\U0001d401bc \U00020000\U00020001 !\U0001d7ceab\n",
    # (?i:'s) also matches "'" + U+017F LONG S (case folding); "'ſt" is
    # ["'ſ", "t"]; other contractions in every case
    "it'\u017ft O'\u017f '\u017f 'S 'sS 'RE 'rE 'Ve 'LL 'lL 'l 'D 'M 'T 'r 're's \u017f's\n",
    # whitespace runs of mixed kinds before letters, others, digits, newlines
    # and the end: \s*[\r\n]+ takes up to the last newline, \s+(?!\S) all
    # but the last character before a non-space, " ?" only a plain space
    "a \t\n \u3000\u00a0b  \r\n\t c\u2028\u2029d \x0b\x0ce\x85f \u1680 g   \n\n  h\t\t!i \u3000!j \n!k  "
    "\t1 \u00a0\u00a02 \r\r\n3  \n \n \u2028 \u202f\u2003!\n \t",
]


def nasty_text(rng, n):
    """a random string of the characters the split regexes treat
    differently: every kind of white space, letters, digits and others in
    and above the BMP, marks, apostrophes and contraction letters"""
    alpha = (list("aZs'tSrReEvVlLmMdD     \t\t\n\n\r\r19!`#.,") +
             ["\u00a0", "\u3000", "\u2028", "\u2029", "\x0b", "\x0c", "\x85", "\u1680", "\u2003", "\u202f", "\u00e9",
              "\u0301", "\u0663", "\u00bd", "\u216b", "\u4e2d", "\U0001f60a", "\U00011099", "\U000110ba", "\U0001d7ce",
              "\U00010107", "\U0001e2f0", "\U00010100", "\U0001d300", "\u017f", "\u212a", "\u200d", "\ufeff",
              "\U0001f3fd", "\u00df", "\u0130", "\u0131", "\x00", "\x7f", "\u180e", "\u200b"])
    return "".join(rng.choice(alpha) for _ in range(n))


def repo_text():
    parts = []
    for p in [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md"))):
        parts.append(open(p, encoding="utf-8", errors="replace").read())
    for h in ("train.h", "extras/train_data.h", "train_cuda.h"):
        src = open(os.path.join(ROOT, h), encoding="utf-8", errors="replace").read()
        parts.extend(re.findall(r"/\*(.*?)\*/", src, flags=re.S))
    return "\n".join(parts)


def rand_unicode(rng):
    kind = rng.randrange(12)
    if kind == 0: return "".join(chr(rng.randrange(0x4E00, 0x9FA0)) for _ in range(rng.randrange(1, 12)))
    if kind == 1: return "".join(chr(rng.randrange(0x3041, 0x3097)) for _ in range(rng.randrange(1, 8)))
    if kind == 2: return "".join(chr(rng.randrange(0x1F600, 0x1F650)) for _ in range(rng.randrange(1, 4)))
    if kind == 3: return "\U0001F469\u200D\U0001F4BB" + rng.choice(["", "\uFE0F", " \U0001F44D\U0001F3FD"])
    if kind == 4: return "".join(rng.choice("àáâãäåæçèéêëìíîïñòóôõöøùúûüýÿÀÉÎÕÜßœŒ") for _ in range(rng.randrange(1, 6))) + "n"
    if kind == 5: return "".join(rng.choice("aeiounc") + rng.choice("\u0301\u0300\u0308\u0327\u0303") for _ in range(rng.randrange(1, 4)))
    if kind == 6: return rng.choice(["Привет мир", "Ελληνικά γράμματα", "مرحبا بالعالم", "नमस्ते दुनिया", "한국어 문장", "Grüße aus Köln"])
    if kind == 7: return "".join(rng.choice("0123456789") for _ in range(rng.randrange(1, 14)))
    if kind == 8: return rng.choice(["٣٤٥", "１２３", "½", "²³", "Ⅻ", "①②"])
    if kind == 9: return rng.choice([" " * rng.randrange(2, 9), "\t" * rng.randrange(1, 4), "\n" * rng.randrange(2, 5),
                                      "\r\n", " \n ", "\u00A0", "\u3000", "  \t\n  "])
    if kind == 10: return rng.choice(["it's", "WE'LL", "don't", "'S", "they're", "I'd", "you've", "O'Neil", "'m"])
    return rng.choice(["{}", "()", "->", "==", "/* */", "...", "!!", "?!", "#include", "$", "€", "§"])


def training_text():
    rng = random.Random(1)
    base = repo_text()
    extra = " ".join(rand_unicode(rng) for _ in range(20000))
    lines = (base + "\n" + extra).split("\n")
    return lines


def nfc_piece(rng):
    """text that NFC changes, or that NFC must leave alone"""
    k = rng.randrange(8)
    if k == 0: return rng.choice(["cafe\u0301", "caf\u00e9", "e\u0301t\u00e9", "n\u0303o", "\u00c5ngstr\u00f6m", "A\u030angstro\u0308m"])
    if k == 1: return "".join(chr(0x1100 + rng.randrange(19)) + chr(0x1161 + rng.randrange(21)) +
                              rng.choice(["", chr(0x11A8 + rng.randrange(27))]) for _ in range(rng.randrange(1, 5)))
    if k == 2: return chr(0xAC00 + 28 * rng.randrange(399)) + chr(0x11A8 + rng.randrange(27))  # LV + T
    if k == 3: return rng.choice(["\u05d1\u05bc\u05b0", "\u05e9\u05c2\u05bc", "x\u0350\u0316",  # marks that never compose
                                  rng.choice("aoqsdAOQ") + "".join(rng.sample("\u0301\u0323\u0307\u0328\u031b\u0345\u0300", 3))])
    if k == 4: return rng.choice(["\u212b", "\u2126", "\u212a", "\u0958\u0959", "\u2adc", "\u0340\u0341", "\u0344", "\u0f73", "\u1f82"])
    if k == 5: return "".join(chr(rng.choice([0x0915, 0x0916, 0x0917, 0x091C, 0x0921, 0x0922, 0x092B, 0x092F])) + "\u093c" for _ in range(2))
    if k == 6: return rng.choice(["\u0b47\u0b3e", "\u0bc6\u0bbe", "\u0cbf\u0cd5", "\u1b05\u1b35", "\U00011099\U000110ba"])
    return "\u0301" + rng.choice(["a", " ", "\u0323", "\u1161"])  # a leading mark, a lone vowel jamo


def heldout_docs(added, n_bytes=1 << 20):
    rng = random.Random(12345)
    words = re.findall(r"\S+", repo_text())
    docs, total = [], 0
    while total < n_bytes:
        parts = []
        size = rng.randrange(500, 8000)
        length = 0
        while length < size:
            r = rng.random()
            if r < 0.62: s = rng.choice(words)
            elif r < 0.9: s = rand_unicode(rng) if rng.random() < 0.7 else nfc_piece(rng)
            elif r < 0.95: s = rng.choice(added)
            else: s = "\n"
            sep = rng.choice([" ", " ", " ", " ", "", "\n", "  "])
            parts.append(s + sep)
            length += len(s) + 1
        d = "".join(parts)
        if rng.random() < 0.2: d = " " + d
        docs.append(d)
        total += len(d.encode("utf-8"))
    return docs + FIXED_DOCS


def train_bytelevel(lines, split_llama3):
    tok = Tokenizer(models.BPE(ignore_merges=split_llama3))
    if split_llama3:
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(L3), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    else:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    specials = ["<|begin_of_text|>", "<|endoftext|>", "<|im_start|>"]
    tr = trainers.BpeTrainer(vocab_size=2000, special_tokens=specials, show_progress=False,
                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(lines, tr)
    tok.add_tokens(["foo bar", "TODO", "TODO:", AddedToken("<tag>", normalized=False)])
    if split_llama3:
        bos = tok.token_to_id("<|begin_of_text|>")
        tok.post_processor = processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                                           special_tokens=[("<|begin_of_text|>", bos)])
    return tok


def train_metaspace(lines):
    tok = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>"))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend(META), normalizers.Replace(" ", META)])
    tok.decoder = decoders.Sequence([decoders.Replace(META, " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)])
    bytes_ = ["<0x%02X>" % i for i in range(256)]
    tr = trainers.BpeTrainer(vocab_size=2300, special_tokens=["<unk>", "<s>", "</s>"] + bytes_,
                             show_progress=False, limit_alphabet=300)
    tok.train_from_iterator(lines, tr)
    tok.add_tokens(["foo bar", "TODO", "TODO:", AddedToken("<tag>", normalized=False)])
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    d = json.loads(tok.to_str())
    # as in Llama 2's file: the <0xNN> tokens are in the vocabulary, not added tokens
    d["added_tokens"] = [a for a in d["added_tokens"] if not re.fullmatch(r"<0x[0-9A-F]{2}>", a["content"])]
    return d


def write_nfc_cases(path):
    """nfc.bin for hf_tokenizer_check's @nfc: int32 n, then n records of
    int32 length + UTF-8 text, int32 length + unicodedata.normalize('NFC',
    text). Every assigned code point (surrogates aside) once, with a prefix
    that it may compose with and a few marks after it in varying orders;
    then every Hangul L+V(+T) and LV+T."""
    import unicodedata as ud
    marks = ["", "\u0301", "\u0323\u0301", "\u0301\u0323", "\u0345\u0308\u0300", "\u031b\u0301\u0323\u0307",
             "\u093c", "\u05b0\u05bc", "\u302a\u0316\u0301"]
    pre = ["", "a", "e\u0301", "\u0915", "\u0b47", "\u1100", "\u0627", "\u03b1\u0313"]
    cases = []
    for cp in range(0x110000):
        if 0xD800 <= cp <= 0xDFFF or ud.category(chr(cp)) == "Cn": continue
        cases.append(pre[cp % len(pre)] + chr(cp) + marks[(cp // len(pre)) % len(marks)])
    for l in range(19):
        for v in range(21):
            for t in (0, 1 + (l + v) % 27):
                cases.append(chr(0x1100 + l) + chr(0x1161 + v) + (chr(0x11A7 + t) if t else ""))
            cases.append(chr(0xAC00 + (l * 21 + v) * 28) + chr(0x11A8 + (l * v) % 27) + "\u0301")
    with open(path, "wb") as f:
        f.write(struct.pack("<i", len(cases)))
        for s in cases:
            for x in (s, ud.normalize("NFC", s)):
                b = x.encode("utf-8")
                f.write(struct.pack("<i", len(b)) + b)


def write_classes(path):
    """classes.bin for hf_tokenizer_check's @classes: one byte per code
    point U+0000..U+10FFFF, the class the package's regex engine gives it:
    0 other, 1 \\s, 2 \\p{L}, 3 \\p{N}; 255 for surrogates and for the code
    points Python's unicodedata has unassigned (the package's Unicode may be
    newer, and the kit's tables join across unassigned gaps)"""
    import unicodedata as ud
    cps = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF and ud.category(chr(c)) != "Cn"]
    text = "".join(map(chr, cps))
    out = bytearray([255]) * 0x110000
    for c in cps: out[c] = 0
    for k, pat in ((1, r"\s"), (2, r"\p{L}"), (3, r"\p{N}")):
        # "removed": the pieces left are the characters that do not match
        kept = bytearray(len(cps))
        for _, (a, b) in pre_tokenizers.Split(Regex(pat), behavior="removed").pre_tokenize_str(text):
            kept[a:b] = b"\x01" * (b - a)
        for i, c in enumerate(cps):
            if not kept[i]: out[c] = k
    with open(path, "wb") as f:
        f.write(out)


def write_pieces(path, n_random=20000):
    """pieces.bin for hf_tokenizer_check's @pieces: int32 n, then per
    string int32 length + UTF-8, and for GPT-2's, Llama 3's and Qwen2's
    regex (in that order) int32 k + the k pieces' byte lengths. The strings:
    FIXED_DOCS, then n_random random ones of nasty_text (seed 99)."""
    rng = random.Random(99)
    texts = FIXED_DOCS + [nasty_text(rng, rng.randrange(1, 24)) for _ in range(n_random)]
    splits = [pre_tokenizers.Split(Regex(p), behavior="isolated") for p in (GPT2, L3, QWEN2)]
    with open(path, "wb") as f:
        f.write(struct.pack("<i", len(texts)))
        for t in texts:
            b = t.encode("utf-8")
            f.write(struct.pack("<i", len(b)) + b)
            for sp in splits:
                lens = [len(p.encode("utf-8")) for p, _ in sp.pre_tokenize_str(t)]
                f.write(struct.pack("<%di" % (len(lens) + 1), len(lens), *lens))


def main():
    t0 = time.time()
    os.makedirs(OUT, exist_ok=True)
    lines = training_text()
    files = {}
    files["gpt2"] = json.loads(train_bytelevel(lines, False).to_str())
    files["llama3"] = json.loads(train_bytelevel(lines, True).to_str())
    files["llama2"] = train_metaspace(lines)
    print("trained 3 tokenizers in %.1f s" % (time.time() - t0))
    q = json.loads(json.dumps(files["llama3"]))
    q["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = QWEN2
    files["qwen2"] = q
    # ignore_merges matters only for a word in the vocabulary that the merges
    # do not build: drop the merges that make some whole words ("Ġ" = space)
    w = json.loads(json.dumps(files["llama3"]))
    words = {t for t in w["model"]["vocab"] if t.startswith("\u0120") and len(t) >= 4}
    gone = set(sorted(words)[::3])
    w["model"]["merges"] = [m for m in w["model"]["merges"]
                            if (m[0] + m[1] if isinstance(m, list) else m.replace(" ", "")) not in gone]
    files["llama3words"] = w
    s = json.loads(json.dumps(files["gpt2"]))
    s["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Digits", "individual_digits": True},
        {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}]}
    files["smollm"] = s
    m = json.loads(json.dumps(files["llama2"]))
    m["normalizer"] = None
    m["pre_tokenizer"] = {"type": "Metaspace", "replacement": META, "prepend_scheme": "first", "split": False}
    m["decoder"] = {"type": "Sequence", "decoders": [{"type": "ByteFallback"}, {"type": "Metaspace", "replacement": META,
                                                                              "prepend_scheme": "first", "split": False}]}
    files["mistral"] = m
    m2 = json.loads(json.dumps(m))
    m2["pre_tokenizer"] = {"type": "Metaspace", "replacement": META, "prepend_scheme": "always", "split": True}
    files["metasplit"] = m2
    # NFC (Qwen2's normalizer): alone on the qwen2 file, and first in a
    # Sequence with llama2's metaspace pair; each with added tokens that NFC
    # changes (matched as NFC(content): Hangul jamo, marks out of order,
    # "cafe" + U+0301; a byte-level file decodes such a token from NFC(content)
    # mapped through the byte alphabet, so "é" alone would decode to the bare
    # byte 0xE9) and one it must not touch (U+212B, normalized=False: raw)
    for name, src, norm, new in (
            ("qwen2nfc", "qwen2", {"type": "NFC"}, ["\u1100\u1161\u11a8", "x\u0323\u0307"]),
            ("llama2nfc", "llama2", {"type": "Sequence", "normalizers": [{"type": "NFC"}] +
                                     files["llama2"]["normalizer"]["normalizers"]}, ["cafe\u0301"])):
        d = json.loads(json.dumps(files[src])); d["normalizer"] = norm
        t = Tokenizer.from_str(json.dumps(d))
        t.add_tokens([AddedToken(a, normalized=True) for a in new] + [AddedToken("\u212b", normalized=False)])
        files[name] = json.loads(t.to_str())
    # files the kit must refuse with a line naming what (tests/test_hf_tokenizer.sh lists the words)
    bad = {}
    u = json.loads(json.dumps(files["gpt2"])); u["model"] = {"type": "Unigram", "unk_id": 0, "vocab": [["a", 0.0]]}
    bad["unigram"] = u
    w = json.loads(json.dumps(files["gpt2"])); w["model"]["type"] = "WordPiece"
    bad["wordpiece"] = w
    n = json.loads(json.dumps(files["qwen2"])); n["normalizer"] = {"type": "NFKC"}
    bad["nfkc"] = n
    n = json.loads(json.dumps(files["qwen2"])); n["normalizer"] = {"type": "Sequence", "normalizers": [
        {"type": "NFC"}, {"type": "Lowercase"}]}
    bad["lowercase"] = n
    r = json.loads(json.dumps(files["llama3"])); r["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = r"\p{L}+|\s+"
    bad["pattern"] = r
    ls = json.loads(json.dumps(files["llama2"])); ls["added_tokens"][1]["lstrip"] = True
    bad["lstrip"] = ls
    for name, d in bad.items():
        with open(os.path.join(OUT, name + ".json"), "w", encoding="utf-8") as f:
            json.dump(d, f, ensure_ascii=False)
    with open(os.path.join(OUT, "truncated.json"), "w", encoding="utf-8") as f:
        f.write(json.dumps(files["gpt2"])[:5000])
    added = ["<|endoftext|>", "<|im_start|>", "<s>", "</s>", "foo bar", "TODO", "TODO:", "<tag>", " foo bar ", "<0x41>",
             "cafe\u0301", "caf\u00e9", "\u212b", "\u00c5", "\u1100\u1161\u11a8", "\uac01", "x\u0307\u0323",
             "x\u0323\u0307", "\u1e8b\u0323"]
    docs = heldout_docs(added)
    with open(os.path.join(OUT, "docs.bin"), "wb") as f:
        f.write(struct.pack("<i", len(docs)))
        for d in docs:
            b = d.encode("utf-8")
            f.write(struct.pack("<i", len(b)) + b)
    total = sum(len(d.encode("utf-8")) for d in docs)
    write_nfc_cases(os.path.join(OUT, "nfc.bin"))
    write_classes(os.path.join(OUT, "classes.bin"))
    write_pieces(os.path.join(OUT, "pieces.bin"))
    for name, d in files.items():
        path = os.path.join(OUT, name + ".json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(d, f, ensure_ascii=False)
        tok = Tokenizer.from_file(path)
        encs = [None] * len(docs)
        for kind in range(3):  # 0: with the BOS, 1: special tokens as text, 2: plain
            which = [i for i in range(len(docs)) if min(i % 10, 2) == kind]
            tok.encode_special_tokens = kind == 1
            for i, e in zip(which, tok.encode_batch([docs[i] for i in which], add_special_tokens=kind == 0)):
                encs[i] = e.ids
        with open(os.path.join(OUT, name + ".ids"), "wb") as f, open(os.path.join(OUT, name + ".dec"), "wb") as g:
            for ids in encs:
                f.write(struct.pack("<i", len(ids)) + struct.pack("<%di" % len(ids), *ids))
                b = tok.decode(ids, skip_special_tokens=False).encode("utf-8")
                g.write(struct.pack("<i", len(b)) + b)
        print("ref %s: vocab %d, %d docs, %d bytes, %d ids" % (name, tok.get_vocab_size(), len(docs), total,
                                                            sum(map(len, encs))))


if __name__ == "__main__":  # (tests/export_ref.py imports the trainers)
    OUT = sys.argv[1]
    main()
