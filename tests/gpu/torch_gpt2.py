#!/usr/bin/env python3
"""torch_gpt2.py - the yardstick: bench/gpt2_cuda's training step in PyTorch.

    python3 tests/gpu/torch_gpt2.py                       GPT-2 124M, B=16, T=1024, bf16 autocast
    python3 tests/gpu/torch_gpt2.py --compile             the same through torch.compile
    python3 tests/gpu/torch_gpt2.py --precision tf32      fp32 values, TF32 tensor-core matmuls
    python3 tests/gpu/torch_gpt2.py --device cpu --model tiny --batch 2 --seq 64 --steps 3

The model and the step are those of examples/gpt2.c as bench/gpt2_cuda runs
them, written the way a PyTorch user would write them:

  GPT-2 (pre-LayerNorm blocks, GELU with the tanh approximation, a 4C MLP),
  the token embedding wte (Vp,C) tied to the LM head, the vocabulary padded
  to Vp = 50304 (its padding rows start at 0 and the loss never sees them),
  initialized as in the kit (N(0, 0.02), the two residual projections
  0.02/sqrt(2L), biases 0, LayerNorm gains 1); random tokens, the same
  batch every step; cross-entropy over the V real classes; AdamW (betas
  0.9/0.95, eps 1e-8, weight decay 0.1 on the matrices only, lr 1e-4),
  gradient norm clipped to 1.0.

How PyTorch runs it here:
  --precision bf16 (default): torch.autocast to bfloat16 (fp32 master
      weights; the matmuls, attention and GELU in bf16, LayerNorm, softmax
      and the loss in fp32, as autocast decides); attention is
      F.scaled_dot_product_attention, held to its flash kernel on CUDA.
  --precision tf32: fp32 values, TF32 tensor-core matmuls.
  --precision fp32: plain fp32 matmuls (TF32 off).
  AdamW with fused=True (one kernel over all the parameters) where this
  PyTorch has it, and the clip as clip_grad_norm_ (foreach): neither reads
  anything back to the host, so, like the kit, a step has one host wait,
  at its end (torch.cuda.synchronize).

It prints what bench/gpt2_cuda prints, in the same words, so that
tests/gpu/run.sh can put the two side by side: ms per step (the median of
--steps timed steps after --warmup untimed ones), tokens/s, the achieved
TFLOP/s (FLOPs counted as bench/gpt2: 6 x matmul parameters x tokens plus
attention's two (T,T) products, the full square) and the MFU against the
same NVIDIA datasheet peak (dense) of the matching precision; then the
memory: torch.cuda.max_memory_allocated (every tensor the caching
allocator handed out: weights, grads, AdamW state, activations, and
PyTorch's own scratch) and the memory reserved (what the allocator took
from the driver), beside the driver's view (total - free).
"""

import argparse
import math
import resource
import statistics
import sys
import time

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError:
    print("torch_gpt2: PyTorch is not installed (pip install torch)", file=sys.stderr)
    sys.exit(2)

GB, GIB = 1e9, float(1 << 30)

# the presets of examples/gpt2.c: n_layer, n_head, n_embd, block_size, vocab_size, padded_vocab
PRESETS = {
    "mini": (4, 4, 192, 256, 256, 256),
    "tiny": (2, 2, 32, 64, 256, 256),
    "gpt2": (12, 12, 768, 1024, 50257, 50304),
    "gpt2-medium": (24, 16, 1024, 1024, 50257, 50304),
    "gpt2-large": (36, 20, 1280, 1024, 50257, 50304),
    "gpt2-xl": (48, 25, 1600, 1024, 50257, 50304),
}

# NVIDIA datasheet figures in TFLOP/s, dense (no sparsity): the table of
# bench/gpt2_cuda.cu, first match of a substring of the device name wins
PEAKS = [
    ("H100 PCIe", "H100 PCIe", 51.0, 378.0, 756.0),
    ("H100 NVL", "H100 NVL", 60.0, 417.5, 835.5),
    ("H100", "H100 SXM", 67.0, 494.7, 989.4),
    ("H200", "H200 SXM", 67.0, 494.7, 989.4),
    ("GH200", "GH200", 67.0, 494.7, 989.4),
    ("H800", "H800 SXM", 67.0, 494.7, 989.4),
    ("A100", "A100", 19.5, 156.0, 312.0),
    ("A800", "A800", 19.5, 156.0, 312.0),
]
PEAK_WHAT = {
    "fp32": "fp32 peak, NVIDIA datasheet",
    "tf32": "TF32 tensor-core peak, dense, NVIDIA datasheet",
    "bf16": "bf16 tensor-core peak, dense, NVIDIA datasheet",
}


def die(msg):
    print("torch_gpt2: " + msg, file=sys.stderr)
    sys.exit(1)


# ---------------------------------------------------------------------------
# the model
# ---------------------------------------------------------------------------
class Block(nn.Module):
    """x (B,T,C) -> (B,T,C): x + attn(ln_1(x)), then x + mlp(ln_2(x))."""

    def __init__(self, n_head, C):
        super().__init__()
        self.n_head = n_head
        self.ln_1 = nn.LayerNorm(C)
        self.c_attn = nn.Linear(C, 3 * C)  # x -> q, k, v
        self.attn_proj = nn.Linear(C, C)
        self.ln_2 = nn.LayerNorm(C)
        self.c_fc = nn.Linear(C, 4 * C)
        self.mlp_proj = nn.Linear(4 * C, C)

    def attention(self, x):
        B, T, C = x.shape
        NH = self.n_head
        q, k, v = self.c_attn(x).split(C, dim=2)  # 3 x (B,T,C)
        # (B,T,C) -> (B,NH,T,hs): SDPA wants the heads before the time axis
        q, k, v = (t.view(B, T, NH, C // NH).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B,NH,T,hs)
        y = y.transpose(1, 2).reshape(B, T, C)  # heads side by side again
        return self.attn_proj(y)

    def forward(self, x):
        x = x + self.attention(self.ln_1(x))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT2(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        L, NH, C, maxT, V, Vp = cfg
        self.V = V
        self.wte = nn.Embedding(Vp, C)  # token embeddings, and the LM head
        self.wpe = nn.Embedding(maxT, C)
        self.h = nn.ModuleList(Block(NH, C) for _ in range(L))
        self.ln_f = nn.LayerNorm(C)
        # the loss sees only the V real classes: a bias of -inf on the
        # padding columns, added inside the LM head's matmul, gives them
        # probability 0 and gradient 0 without another (B,T,Vp) tensor
        pad = torch.zeros(Vp)
        pad[V:] = float("-inf")
        self.register_buffer("vocab_mask", pad, persistent=False)
        self.init_weights(L)

    @torch.no_grad()
    def init_weights(self, L):
        std, std_res = 0.02, 0.02 / math.sqrt(2.0 * L)
        for name, p in self.named_parameters():
            if name.endswith(".bias"):
                p.zero_()
            elif name.startswith("ln") or ".ln_" in name:
                p.fill_(1.0)  # LayerNorm gains
            elif name.endswith("attn_proj.weight") or name.endswith("mlp_proj.weight"):
                p.normal_(0.0, std_res)  # they write into the residual stream
            else:
                p.normal_(0.0, std)
        self.wte.weight[self.V:].zero_()  # padding rows: no token has them

    def forward(self, idx, targets):
        B, T = idx.shape
        pos = torch.arange(T, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)  # (B,T,C)
        for block in self.h:
            x = block(x)
        x = self.ln_f(x)
        logits = F.linear(x, self.wte.weight, self.vocab_mask)  # (B,T,Vp), tied head
        # autocast (on CUDA) runs cross_entropy in fp32, whatever the logits are
        return F.cross_entropy(logits.view(B * T, -1), targets.view(B * T))


def matmul_params(cfg):
    L, NH, C, maxT, V, Vp = cfg
    return L * 12.0 * C * C + Vp * C  # as gpt2_matmul_params in examples/gpt2.c


def step_flops(cfg, B, T):
    L, C = cfg[0], cfg[2]
    return 6.0 * matmul_params(cfg) * B * T + 3.0 * L * (2.0 * 2.0 * B * T * T * C)


def find_peak(name):
    """{precision: TFLOP/s} of the first row whose substring is in the name, or None."""
    for match, what, fp32, tf32, bf16 in PEAKS:
        if match in name:
            return {"fp32": fp32, "tf32": tf32, "bf16": bf16}
    return None


def make_adamw(model, lr, device):
    decay = [p for p in model.parameters() if p.dim() >= 2]  # matrices decay; biases and norms don't
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}]
    try:
        return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), eps=1e-8, fused=True), "fused"
    except (RuntimeError, TypeError, ValueError) as e:
        if device.type == "cuda":
            die("fused AdamW is not available in this PyTorch: %s" % e)
        # older PyTorch has no fused AdamW on the CPU: the multi-tensor one
        return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), eps=1e-8, foreach=True), "foreach"


def parse_args():
    ap = argparse.ArgumentParser(description="bench/gpt2_cuda's GPT-2 training step in PyTorch")
    ap.add_argument("--model", default="gpt2", choices=sorted(PRESETS), help="a preset of examples/gpt2 [gpt2]")
    ap.add_argument("--batch", type=int, default=16, help="B [16]")
    ap.add_argument("--seq", type=int, default=1024, help="T [1024]")
    ap.add_argument("--steps", type=int, default=10, help="timed steps [10]")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps first (compilation, cuBLAS heuristics) [2]")
    ap.add_argument("--precision", default="bf16", choices=["fp32", "tf32", "bf16"], help="[bf16]")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model")
    ap.add_argument("--device", default="cuda", help="cuda or cpu [cuda]")
    ap.add_argument("--lr", type=float, default=1e-4, help="AdamW learning rate [1e-4]")
    ap.add_argument("--peak-tflops", type=float, default=0.0, help="the peak for MFU, when the table does not know it")
    ap.add_argument("--threads", type=int, default=0, help="CPU threads (0: PyTorch's default)")
    ap.add_argument("--profile", default="", metavar="FILE",
                    help="then one more step under torch.profiler; its top kernels by device time into FILE")
    a = ap.parse_args()
    for flag, v, lo in (("--batch", a.batch, 1), ("--seq", a.seq, 1), ("--steps", a.steps, 1), ("--warmup", a.warmup, 0)):
        if v < lo:
            die("%s must be at least %d, got %d" % (flag, lo, v))
    if a.seq > PRESETS[a.model][3]:
        die("--seq %d is longer than the model's context (%d)" % (a.seq, PRESETS[a.model][3]))
    return a


def main():
    a = parse_args()
    cfg = PRESETS[a.model]
    L, NH, C, maxT, V, Vp = cfg
    B, T = a.batch, a.seq
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    try:
        device = torch.device(a.device)
    except RuntimeError as e:
        die("--device: %s" % e)
    cuda = device.type == "cuda"
    if cuda and not torch.cuda.is_available():
        print("torch_gpt2: no CUDA device (torch.cuda.is_available() is False); --device cpu runs on the CPU",
              file=sys.stderr)
        sys.exit(2)

    # precision: TF32 matmuls only where asked for (bf16 autocast leaves few fp32 matmuls)
    tf32 = a.precision != "fp32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    autocast_dtype = torch.bfloat16 if a.precision == "bf16" else None

    # flash attention: bf16 on a GPU is what it takes (it has no fp32
    # kernel). The other SDPA kernels are switched off, so that SDPA runs
    # flash or stops with "No available kernel" (these are process-wide
    # settings, which torch.compile also honours)
    attn_what = "F.scaled_dot_product_attention (kernel chosen by PyTorch)"
    if cuda and a.precision == "bf16":
        torch.backends.cuda.enable_flash_sdp(True)
        torch.backends.cuda.enable_mem_efficient_sdp(False)
        torch.backends.cuda.enable_math_sdp(False)
        if hasattr(torch.backends.cuda, "enable_cudnn_sdp"):
            torch.backends.cuda.enable_cudnn_sdp(False)
        attn_what = "F.scaled_dot_product_attention, flash kernel only"

    if cuda:
        dev_name = torch.cuda.get_device_name(device)
        free_b, total_b = torch.cuda.mem_get_info(device)
        dev_line = "%s, %.1f GB" % (dev_name, total_b / GB)
    else:
        dev_name = "cpu"
        dev_line = "CPU, %d threads" % torch.get_num_threads()
    peaks = find_peak(dev_name) if cuda else None
    peak = a.peak_tflops if a.peak_tflops > 0 else (peaks[a.precision] if peaks else 0.0)

    torch.manual_seed(1)
    model = GPT2(cfg).to(device)
    n_params = sum(p.numel() for p in model.parameters())
    opt, opt_kind = make_adamw(model, a.lr, device)
    step_model = torch.compile(model) if a.compile else model

    g = torch.Generator().manual_seed(7)
    x = torch.randint(0, V, (B, T), generator=g).to(device)
    y = torch.randint(0, V, (B, T), generator=g).to(device)
    flops = step_flops(cfg, B, T)

    print("torch_gpt2: %s, precision %s%s, torch %s, %s; median of %d steps after %d warm-up step%s"
          % (dev_line, a.precision, " (bf16 autocast, fp32 master weights)" if autocast_dtype else "",
             torch.__version__, "torch.compile" if a.compile else "eager", a.steps, a.warmup,
             "" if a.warmup == 1 else "s"))
    print("%s: L=%d NH=%d C=%d Vp=%d, %.1fM parameters, B=%d T=%d (%d tokens/step): %.1f TFLOP per step"
          % (a.model, L, NH, C, Vp, n_params / 1e6, B, T, B * T, flops / 1e12))
    print("attention: %s; AdamW %s; gradient clipping: clip_grad_norm_ 1.0" % (attn_what, opt_kind))
    sys.stdout.flush()

    params = list(model.parameters())

    def step():
        opt.zero_grad(set_to_none=True)
        if autocast_dtype is not None:
            with torch.autocast(device_type=device.type, dtype=autocast_dtype):
                loss = step_model(x, y)
        else:
            loss = step_model(x, y)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(params, 1.0, foreach=True)  # stays on the device
        opt.step()
        return loss.detach(), norm

    def sync():
        if cuda:
            torch.cuda.synchronize(device)

    times = []
    first_loss = loss = norm = None
    for s in range(-a.warmup, a.steps):
        sync()
        t0 = time.perf_counter()
        loss, norm = step()
        sync()  # the step's one host wait
        dt = time.perf_counter() - t0
        if s == -a.warmup or (a.warmup == 0 and s == 0):
            first_loss = loss.item()
        if s < 0:
            print("warm-up step: %.0f ms, loss %.3f (ln V = %.3f)" % (1e3 * dt, loss.item(), math.log(V)))
            sys.stdout.flush()
        else:
            times.append(dt)

    ms = 1e3 * statistics.median(times)
    mean_ms = 1e3 * statistics.fmean(times)
    tok_s = B * T / (ms / 1e3)
    tflops = flops / (ms / 1e3) / 1e12
    print()
    print("step %.1f ms median, %.1f ms mean  (one host wait per step)" % (ms, mean_ms))
    print("%.0f tokens/s   %.1f TFLOP/s achieved (FLOPs as bench/gpt2: 6 x matmul params x tokens + attention)"
          % (tok_s, tflops))
    if peak > 0:
        print("MFU %.1f%% of %.1f TFLOP/s (%s)" % (100.0 * tflops / peak, peak,
                                                   "--peak-tflops" if a.peak_tflops > 0 else PEAK_WHAT[a.precision]))
    elif cuda:
        print("MFU: unknown peak for '%s', pass --peak-tflops" % dev_name)
    else:
        print("MFU: no datasheet peak for a CPU, pass --peak-tflops")
    loss_v, norm_v = loss.item(), norm.item()
    if not math.isfinite(loss_v):
        die("the loss is %r" % loss_v)
    print("loss %.3f -> %.3f over %d steps (last gradient norm %.3f)" % (first_loss, loss_v, a.warmup + a.steps, norm_v))
    print()
    if cuda:
        alloc = torch.cuda.max_memory_allocated(device)
        reserved = torch.cuda.max_memory_reserved(device)
        free_b, total_b = torch.cuda.mem_get_info(device)
        print("device memory: torch.cuda.max_memory_allocated %.3f GB (%.2f GiB), max_memory_reserved %.3f GB "
              "(%.2f GiB)" % (alloc / GB, alloc / GIB, reserved / GB, reserved / GIB))
        print("device memory in use now: cudaMemGetInfo %.3f GB (total - free; the CUDA context and every "
              "library's workspace included)" % ((total_b - free_b) / GB))
    else:
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024.0  # Linux: KiB
        print("host memory: peak RSS %.3f GB (%.2f GiB); no device memory on the CPU" % (rss / GB, rss / GIB))
    if a.profile:  # one more step, its kernels by device time (tests/gpu/run.sh keeps the file)
        from torch.profiler import profile, ProfilerActivity
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
        with profile(activities=acts) as prof:
            step()
            sync()
        key = "cuda_time_total" if cuda else "cpu_time_total"
        try:
            table = prof.key_averages().table(sort_by=key, row_limit=30)
        except Exception:  # newer PyTorch names it device_time_total
            table = prof.key_averages().table(sort_by="device_time_total" if cuda else key, row_limit=30)
        with open(a.profile, "w") as f:
            f.write("torch.profiler, one step of GPT-2 %s B=%d T=%d, precision %s, %s\n%s\n"
                    % (a.model, B, T, a.precision, "torch.compile" if a.compile else "eager", table))
        print("profile: the top kernels of one step by device time written to %s" % a.profile)


if __name__ == "__main__":
    main()
