#!/usr/bin/env python3
"""lightning_linear.py - the seed's experiment itself, in PyTorch Lightning.

    python3 tests/gpu/lightning_linear.py                       width 20000 on the GPU
    python3 tests/gpu/lightning_linear.py --device cpu --width 1000

The seed traced GPU memory through a Lightning training step of

    Linear(20000,20000) -> ReLU -> Linear(20000,20000) -> ReLU -> Linear(20000,1)

(800,060,001 fp32 parameters, 2.98 GiB) under Trainer(devices=1,
strategy="ddp") with AdamW, and found a peak of 18.79 GiB at the first
optimizer.step(). examples/linear_memory_cuda runs the same model through
train.h and prints its ledger; this script runs it through Lightning, on
the same GPU, with what examples/linear_memory does otherwise: 8 rows of
synthetic regression data (x uniform in [-1,1), y = 0.5 x0 x1 + 0.3
sin(3 x2)), an MSE loss, AdamW with PyTorch's defaults (betas 0.9/0.999,
weight decay 0.01) at lr 0.04/width, 2 steps, no clipping (the seed set no
gradient_clip_val), fp32 ("32-true", Lightning's default).

A callback reads the allocator after each line of the step the seed logged
(torch.cuda.memory_allocated, and max_memory_allocated: the high-water mark
so far) and prints them beside the seed's figures; at the end the peak,
torch.cuda.max_memory_allocated, in GiB (2^30 bytes, what PyTorch prints).
No checkpoint is written (enable_checkpointing=False): the seed logged
none, and at width 20000 it would be 9.6 GB on disk.

On the CPU (--device cpu) there is no allocator to ask: the columns are the
process's resident memory (RSS) instead, for a check that the script runs.
"""

import argparse
import os
import resource
import sys
import time

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError:
    print("lightning_linear: PyTorch is not installed (pip install torch)", file=sys.stderr)
    sys.exit(2)
try:
    import lightning as L
except ImportError:
    try:
        import pytorch_lightning as L  # the older package name
    except ImportError:
        print("lightning_linear: Lightning is not installed (pip install lightning)", file=sys.stderr)
        sys.exit(2)

GB, GIB = 1e9, float(1 << 30)

# the seed's trace, GiB on the GPU at width 20000 (cumulative memory_allocated)
SEED = {
    "on the device": 3.85,    # strategy.model_to_device()
    "DDP set up": 6.84,       # DistributedDataParallel(...): 9.82, then 6.84 after resume_end's empty_cache
    "forward + loss": 6.88,   # + 0.04 at on_before_backward
    "backward": 9.85,         # + 2.97 at on_after_backward
    "optimizer step": 18.79,  # optimizer.step(): the peak of the run
}


def die(msg):
    print("lightning_linear: " + msg, file=sys.stderr)
    sys.exit(1)


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class Probe(L.Callback):
    """Memory after each line of the step: (phase, step, now, high-water mark so far)."""

    def __init__(self, cuda):
        self.cuda = cuda
        self.rows = []
        self.step = 0

    def read(self, phase):
        if self.cuda:
            torch.cuda.synchronize()
            now, high = torch.cuda.memory_allocated(), torch.cuda.max_memory_allocated()
        else:
            now = rss_bytes()  # the kernel's high-water mark lags a little: never below now
            high = max(now, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
        self.rows.append((phase, self.step, now, high))

    # after strategy.setup: the model moved to the device, wrapped in DDP,
    # the optimizer made, and resume_end's empty_cache
    def on_fit_start(self, trainer, pl_module):
        self.read("DDP set up")

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.step = batch_idx + 1

    def on_before_backward(self, trainer, pl_module, loss):
        self.read("forward + loss")

    def on_after_backward(self, trainer, pl_module):
        self.read("backward")

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.read("optimizer step")


class SeedNet(L.LightningModule):
    def __init__(self, width, lr):
        super().__init__()
        self.lr = lr
        self.net = nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
                                 nn.Linear(width, 1))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.mse_loss(self.net(x).squeeze(1), y)
        self.last_loss = loss.detach()
        return loss

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=self.lr)  # PyTorch's defaults otherwise


def probed_ddp(probe):
    """strategy="ddp" (DDPStrategy with its defaults), reading the memory
    between model_to_device() and the DistributedDataParallel wrap, where
    Lightning has no hook; None where this Lightning has no such class."""
    try:
        from lightning.pytorch.strategies import DDPStrategy
    except ImportError:
        try:
            from pytorch_lightning.strategies import DDPStrategy
        except ImportError:
            return None

    class ProbedDDP(DDPStrategy):
        def configure_ddp(self):
            probe.read("on the device")
            super().configure_ddp()

    return ProbedDDP()


def make_data(rows, width, seed):
    g = torch.Generator().manual_seed(seed)
    x = 2.0 * torch.rand(rows, width, generator=g) - 1.0
    y = 0.5 * x[:, 0] * x[:, 1] + 0.3 * torch.sin(3.0 * x[:, 2])
    return x, y


def main():
    ap = argparse.ArgumentParser(description="the seed's 20000x20000 Lightning memory experiment")
    ap.add_argument("--width", type=int, default=20000, help="layer width [20000, the seed's]")
    ap.add_argument("--batch", type=int, default=8, help="rows per batch [8]")
    ap.add_argument("--steps", type=int, default=2, help="training steps [2]")
    ap.add_argument("--lr", type=float, default=0.0, help="AdamW learning rate [0.04/width]")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"], help="[cuda]")
    a = ap.parse_args()
    if a.width < 3 or a.batch < 1 or a.steps < 1:
        die("--width must be at least 3, --batch and --steps at least 1")
    lr = a.lr if a.lr > 0 else 0.04 / a.width
    cuda = a.device == "cuda"
    if cuda and not torch.cuda.is_available():
        print("lightning_linear: no CUDA device (torch.cuda.is_available() is False); --device cpu runs on the CPU",
              file=sys.stderr)
        sys.exit(2)

    torch.manual_seed(1)
    t0 = time.perf_counter()
    model = SeedNet(a.width, lr)  # built in host memory, as the seed did
    n_params = sum(p.numel() for p in model.parameters())
    P = 4.0 * n_params
    x, y = make_data(a.batch * a.steps, a.width, 1)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=a.batch, shuffle=False)
    where = torch.cuda.get_device_name() if cuda else "CPU"
    print("lightning_linear: Lightning %s, torch %s, %s; Trainer(devices=1, strategy=\"ddp\"), 32-true"
          % (L.__version__, torch.__version__, where))
    print("model: Linear(%d,%d) -> ReLU -> Linear(%d,%d) -> ReLU -> Linear(%d,1): %d parameters = %.2f GB "
          "= %.2f GiB (P); batch %d, %d steps, AdamW lr %g" % (a.width, a.width, a.width, a.width, a.width, n_params,
                                                            P / GB, P / GIB, a.batch, a.steps, lr))
    sys.stdout.flush()

    probe = Probe(cuda)
    strategy = probed_ddp(probe) or "ddp"
    trainer = L.Trainer(accelerator="gpu" if cuda else "cpu", devices=1, strategy=strategy, precision="32-true",
                        max_steps=a.steps, max_epochs=1, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                        callbacks=[probe])
    trainer.fit(model, train_dataloaders=loader)
    seconds = time.perf_counter() - t0
    if probe.step != a.steps:
        die("Lightning ran %d steps, not %d" % (probe.step, a.steps))
    loss = float(model.last_loss)
    if loss != loss:
        die("the loss is NaN")

    col = "allocated GiB" if cuda else "RSS GiB"
    print("\n== Memory after each line of the step (GiB; the seed's column is for width 20000) ==")
    if a.width != 20000:
        print("   (this run has --width %d: P = %.4f GiB, the seed's P = 2.98 GiB)" % (a.width, P / GIB))
    print("  %-16s %4s %8s %14s %14s" % ("phase", "step", "seed", col, "peak so far"))
    for phase, step, now, high in probe.rows:
        seed = "%.2f" % SEED[phase] if step <= 1 and phase in SEED else "-"
        print("  %-16s %4d %8s %14.4f %14.4f" % (phase, step, seed, now / GIB, high / GIB))
    print("\nloss after %d steps %.6f, %.1f s" % (a.steps, loss, seconds))
    if cuda:
        peak = torch.cuda.max_memory_allocated()
        reserved = torch.cuda.max_memory_reserved()
        free_b, total_b = torch.cuda.mem_get_info()
        print("peak GPU memory: torch.cuda.max_memory_allocated %.4f GiB (%.3f GB) = %.2f x P; "
              "the seed's Lightning run: 18.79 GiB" % (peak / GIB, peak / GB, peak / P))
        print("max_memory_reserved %.4f GiB; driver (cudaMemGetInfo, total - free) %.4f GiB now"
              % (reserved / GIB, (total_b - free_b) / GIB))
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        print("peak host memory: RSS %.4f GiB (%.3f GB) = %.2f x P (the CPU has no max_memory_allocated)"
              % (peak / GIB, peak / GB, peak / P))


if __name__ == "__main__":
    main()
