#!/usr/bin/env python3
"""gpt2_torch.py - the kit's CPU training step beside PyTorch's, in one run.

    python3 bench/gpt2_torch.py                   both models, 2 threads, 3 rounds
    python3 bench/gpt2_torch.py --model gpt2 --threads 1 --rounds 5

Each round runs bench/gpt2 (the kit: median ms of its timed steps) and then
tests/gpu/torch_gpt2.py --device cpu --precision fp32 (the same model and
step written the way a PyTorch user writes it: nn.Module, F.scaled_dot_
product_attention, AdamW(foreach), clip_grad_norm_), alternating, so both
see the same machine. Models as bench/gpt2 runs them: GPT-2 124M at B=4,
T=64 and examples/gpt2's "mini" preset at its default batch (B=16, T=128).
Prints the median over rounds of each side's ms/step and the ratio
torch / kit (above 1: the kit is faster).

Needs bench/gpt2 built (./build.sh bench; it needs OpenBLAS, its yardstick)
and torch importable (not needed by anything else in the kit, never by CI).
"""
import argparse
import os
import re
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = {"gpt2": (4, 64), "mini": (16, 128)}  # B, T as bench/gpt2 runs them


def die(msg):
    print("gpt2_torch: " + msg, file=sys.stderr)
    sys.exit(2)


def run(cmd, pattern):
    """run cmd, return float(group 1) of the last line matching pattern"""
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    hits = re.findall(pattern, p.stdout, re.M)
    if p.returncode != 0 or not hits:
        die("%s failed (exit %d): %s" % (" ".join(cmd), p.returncode, (p.stderr or p.stdout).strip()[-300:]))
    return float(hits[-1]), p.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="both", choices=["both"] + sorted(MODELS))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=5, help="timed steps per side per round [5]")
    a = ap.parse_args()
    kit = os.path.join(ROOT, "bench", "gpt2")
    if not os.access(kit, os.X_OK):
        die("bench/gpt2 is not built: ./build.sh bench (it needs libopenblas-dev)")
    try:
        import torch  # noqa: F401 (only to say early that it is missing)
    except ImportError:
        die("python3 cannot import torch (pip install torch; the kit never needs it)")
    import torch
    models = sorted(MODELS) if a.model == "both" else [a.model]
    print("gpt2_torch: %d threads, %d rounds, %d timed steps per side per round; torch %s; load average %.1f"
          % (a.threads, a.rounds, a.steps, torch.__version__, os.getloadavg()[0]))
    for m in models:
        B, T = MODELS[m]
        k_ms, t_ms = [], []
        isa, blas = "", ""
        for r in range(a.rounds):
            ms, out = run([kit, "--model", m, "--threads", str(a.threads), "--steps", str(a.steps)],
                          r"^\s+step\s+([0-9.]+) ms")
            k_ms.append(ms)
            hit = re.search(r"train\.h kernels: ([^;\n]+)", out)
            isa = hit.group(1) if hit else isa
            hit = re.search(r"step rate / OpenBLAS rate: ([0-9]+%)", out)
            blas = " (%s of OpenBLAS's rate)" % hit.group(1) if hit else ""
            ms, _ = run([sys.executable, "tests/gpu/torch_gpt2.py", "--device", "cpu", "--precision", "fp32",
                         "--model", m, "--batch", str(B), "--seq", str(T), "--threads", str(a.threads),
                         "--steps", str(a.steps), "--warmup", "1"], r"^step ([0-9.]+) ms median")
            t_ms.append(ms)
            print("  %-5s round %d: kit %8.1f ms/step%s   torch %8.1f ms/step" % (m, r + 1, k_ms[-1], blas, t_ms[-1]))
        k, t = statistics.median(k_ms), statistics.median(t_ms)
        print("%-5s B=%d T=%d: kit %.1f ms/step (%s), torch %.1f ms/step: torch / kit = %.2fx"
              % (m, B, T, k, isa, t, t / k))
    print("load average after: %.1f" % os.getloadavg()[0])


if __name__ == "__main__":
    main()
