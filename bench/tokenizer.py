#!/usr/bin/env python3
"""bench/tokenizer.py [DIR] [--reps N] [--names a,b,...] - encode speed on
one core: Hugging Face's `tokenizers` package beside the kit's tokenizer.json
reader (bench/tokenizer.c), in the same run, on the same text.

      ./build.sh bench && python3 bench/tokenizer.py

DIR is what tests/hf_tokenizer_ref.py writes (docs.bin: about 1 MB of
held-out documents, NAME.json: the tokenizers); without DIR the script runs
that script into a temporary folder first, as tests/test_hf_tokenizer.sh
does, and removes it at the end.

Both sides encode every document of docs.bin the same way: added tokens
matched (the special ones too), nothing added around the text (no BOS):
the kit's trn_tokenizer_encode, the package's add_special_tokens=False with
encode_special_tokens off. The id counts of the two sides are compared.

One core: RAYON_NUM_THREADS=1 and TOKENIZERS_PARALLELISM=false are set
before the package is imported, and the CPU time the package used is
reported beside its wall time (cores = CPU / wall; about 1.0 here).
The package gets its fastest single-core path: each round times
  encode   a Python loop of tok.encode(doc) over the documents,
  batch    tok.encode_batch(docs),
  fast     tok.encode_batch_fast(docs) (no offsets; tokenizers >= 0.21),
and the table reports the fastest of the three by median, naming it. Its
BPE word cache is warm after the first round, as in any long run.

Alternating: for each tokenizer, rounds 1-4 of the package, then the kit's
`bench/tokenizer DIR NAME N` (N passes, median), then rounds 5-7, so load
from other jobs on a shared machine falls on both sides. Times are wall
clock, MB = 1e6 bytes of document text, median of N with min .. max.
"""
import argparse
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time

os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
KIT = os.path.join(ROOT, "bench", "tokenizer")
REF = os.path.join(ROOT, "tests", "hf_tokenizer_ref.py")
# the tokenizers hf_tokenizer_ref.py writes that the kit reads (the refused
# ones, unigram.json and so on, are skipped by name)
NAMES = ["gpt2", "llama3", "llama3words", "qwen2", "smollm", "llama2", "mistral", "metasplit", "qwen2nfc", "llama2nfc"]


def die(msg):
    print("bench/tokenizer.py: " + msg, file=sys.stderr)
    sys.exit(2)


def read_docs(path):
    """docs.bin: int32 n_docs, then per document int32 length + UTF-8 bytes."""
    try:
        with open(path, "rb") as f:
            b = f.read()
    except OSError as e:
        die("%s: %s" % (path, e.strerror))
    if len(b) < 4:
        die("%s: too short for a docs.bin" % path)
    n, = struct.unpack_from("<i", b, 0)
    off, docs = 4, []
    for _ in range(n):
        if off + 4 > len(b):
            die("%s: truncated" % path)
        m, = struct.unpack_from("<i", b, off)
        if m < 0 or off + 4 + m > len(b):
            die("%s: bad document length" % path)
        docs.append(b[off + 4:off + 4 + m].decode("utf-8"))
        off += 4 + m
    return docs, off - 4 - 4 * n


def median(xs):
    s = sorted(xs)
    return s[len(s) // 2]


def run_kit(d, name, reps):
    """bench/tokenizer's line: "kit NAME: MED MB/s (MIN .. MAX), N ids, ..."."""
    p = subprocess.run([KIT, d, name, str(reps)], capture_output=True, text=True)
    if p.returncode != 0:
        die("bench/tokenizer %s %s: %s" % (d, name, (p.stderr or p.stdout).strip()))
    w = p.stdout.replace("(", " ").replace(")", " ").replace(",", " ").split()
    # kit NAME: MED MB/s MIN .. MAX N ids ...
    return float(w[2]), float(w[4]), float(w[6]), int(w[7])


def main():
    ap = argparse.ArgumentParser(description="encode MB/s on one core: tokenizers package vs the kit")
    ap.add_argument("dir", nargs="?", help="a folder written by tests/hf_tokenizer_ref.py (default: make one)")
    ap.add_argument("--reps", type=int, default=7, help="timed rounds per side (default 7)")
    ap.add_argument("--names", help="comma-separated tokenizer names (default: every one present)")
    a = ap.parse_args()
    if not 1 <= a.reps <= 64:
        die("--reps must be 1..64")
    if not (os.path.isfile(KIT) and os.access(KIT, os.X_OK)):
        die("bench/tokenizer is not built (./build.sh bench builds it)")
    try:
        import tokenizers
        from tokenizers import Tokenizer
    except ImportError:
        die("python3 cannot import tokenizers (python3 -m pip install tokenizers)")

    tmp = None
    d = a.dir
    if d is None:
        tmp = tempfile.mkdtemp(prefix="trn_tokbench.")
        d = tmp
        print("writing the documents and tokenizers: python3 tests/hf_tokenizer_ref.py %s" % d, flush=True)
        p = subprocess.run([sys.executable, REF, d], capture_output=True, text=True)
        if p.returncode != 0:
            shutil.rmtree(tmp, ignore_errors=True)
            die("tests/hf_tokenizer_ref.py failed: %s" % (p.stderr.strip().splitlines() or ["?"])[-1])
    elif not os.path.isfile(os.path.join(d, "docs.bin")):
        die("%s has no docs.bin (write it with: python3 tests/hf_tokenizer_ref.py %s)" % (d, d))
    try:
        docs, nbytes = read_docs(os.path.join(d, "docs.bin"))
        names = a.names.split(",") if a.names else [n for n in NAMES if os.path.isfile(os.path.join(d, n + ".json"))]
        if not names:
            die("%s has none of the tokenizers %s" % (d, " ".join(NAMES)))
        for name in names:
            if not os.path.isfile(os.path.join(d, name + ".json")):
                die("%s: no such tokenizer" % os.path.join(d, name + ".json"))
        try:
            load = "%.1f %.1f %.1f" % os.getloadavg()
        except OSError:
            load = "?"
        print("tokenizers %s, Python %s; %d documents, %d bytes; %d rounds; one core; load average %s"
              % (tokenizers.__version__, sys.version.split()[0], len(docs), nbytes, a.reps, load), flush=True)

        def one_round(tok, res):
            """one timed pass of each of the package's ways; res[way] += (wall, cpu), ids."""
            for way in ("encode", "batch", "fast") if hasattr(tok, "encode_batch_fast") else ("encode", "batch"):
                c0, t0 = time.process_time(), time.perf_counter()
                if way == "encode":
                    n = sum(len(tok.encode(x, add_special_tokens=False).ids) for x in docs)
                elif way == "batch":
                    n = sum(len(e.ids) for e in tok.encode_batch(docs, add_special_tokens=False))
                else:
                    n = sum(len(e.ids) for e in tok.encode_batch_fast(docs, add_special_tokens=False))
                t, c = time.perf_counter() - t0, time.process_time() - c0
                res.setdefault(way, []).append((t, c, n))

        rows = []
        for name in names:
            path = os.path.join(d, name + ".json")
            try:
                tok = Tokenizer.from_file(path)
            except Exception as e:
                die("%s: the package cannot load it: %s" % (path, e))
            tok.encode_special_tokens = False
            res = {}
            first = (a.reps + 1) // 2  # 7: 4 rounds, the kit, 3 rounds
            for _ in range(first):
                one_round(tok, res)
            kit = run_kit(d, name, a.reps)
            for _ in range(a.reps - first):
                one_round(tok, res)
            ways = {}
            for way, v in res.items():
                mbs = [nbytes / 1e6 / t for t, c, n in v]
                cores = sum(c for t, c, n in v) / sum(t for t, c, n in v)
                ids = {n for t, c, n in v}
                ways[way] = (median(mbs), min(mbs), max(mbs), cores, ids)
            best = max(ways, key=lambda w: ways[w][0])
            rows.append((name, best, ways, kit))
            pk = ways[best]
            ids_ok = pk[4] == {kit[3]}
            print("%-12s package %-6s %6.2f MB/s   kit %6.2f MB/s   ids %s%s" % (
                name, best, pk[0], kit[0], kit[3], "" if ids_ok else "  (package: %s: NOT THE SAME)" % sorted(pk[4])),
                flush=True)
            if not ids_ok:
                die("%s: the package gave %s ids, the kit %d: not the same work" % (name, sorted(pk[4]), kit[3]))
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)

    try:
        load = "%.1f %.1f %.1f" % os.getloadavg()
    except OSError:
        load = "?"
    print()
    print("encode MB/s on one core, median of %d (min .. max); MB = 1e6 bytes of document text" % a.reps)
    print("%-12s %-6s %22s %22s %7s" % ("tokenizer", "way", "tokenizers (MB/s)", "kit (MB/s)", "ratio"))
    for name, best, ways, kit in rows:
        pk = ways[best]
        print("%-12s %-6s %6.2f (%5.2f .. %5.2f) %6.2f (%5.2f .. %5.2f) %6.2fx" % (
            name, best, pk[0], pk[1], pk[2], kit[0], kit[1], kit[2], kit[0] / pk[0]))
    print()
    print("the package's three ways, median MB/s [CPU cores used]:")
    print("%-12s %16s %16s %16s" % ("tokenizer", "encode (loop)", "encode_batch", "encode_batch_fast"))
    for name, best, ways, kit in rows:
        print("%-12s" % name + "".join(" %9.2f [%.2f]" % (ways[w][0], ways[w][3]) if w in ways else " %16s" % "-"
                                       for w in ("encode", "batch", "fast")))
    print("load average at the end: %s" % load)


if __name__ == "__main__":
    main()
